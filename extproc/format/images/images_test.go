package images

import (
	"strconv"
	"strings"
	"testing"

	"github.com/modelgateway/gateway/extproc/format"
	"github.com/modelgateway/gateway/extproc/format/formattest"
	"github.com/modelgateway/gateway/internal/config"
	"github.com/modelgateway/gateway/internal/pricing"
	"github.com/modelgateway/gateway/internal/usage"
)

func meterOf(own *Fields, contentType string) func(chunks ...[]byte) format.Meter {
	return func(chunks ...[]byte) format.Meter {
		req := format.Request{Own: own}
		return formattest.Feed(Format{}.NewMeter(req, []byte(`{"model":"gpt-image-1","prompt":"a lighthouse at dawn"}`), contentType), chunks...)
	}
}

// A GPT image model's reply is billed from its usage: text input as
// input, image input and output as image tokens, text output (when the
// reply breaks the output down) as output.
func TestMeterJSON(t *testing.T) {
	formattest.CheckJSON(t, formattest.Read(t, "reply.json"), meterOf(&Fields{N: 2}, "application/json"),
		usage.Report{Usage: usage.Usage{Input: 10, ImageInput: 40, ImageOutput: 12480}})
	formattest.CheckJSON(t, formattest.Read(t, "reply-details.json"), meterOf(&Fields{N: 1}, "application/json"),
		usage.Report{Usage: usage.Usage{Input: 12, ImageOutput: 1056, Output: 44}})
	// A model priced per image reports no usage: its images are counted.
	formattest.CheckJSON(t, formattest.Read(t, "reply-dalle.json"), meterOf(&Fields{N: 3, PerImage: true}, "application/json"),
		usage.Report{Usage: usage.Usage{Images: 3}})
}

// A stream is billed from its completed events, split anywhere; one cut
// short is estimated and flagged, each missing image at its hold.
func TestMeterStream(t *testing.T) {
	rec := formattest.Read(t, "stream.txt")
	formattest.CheckStream(t, rec, meterOf(&Fields{N: 1, Partials: 2}, "text/event-stream"),
		usage.Report{Usage: usage.Usage{Input: 9, ImageOutput: 1256}})
	cut := meterOf(&Fields{N: 1, Partials: 2, OutputBound: 33_000}, "text/event-stream")(rec[:len(rec)/2])
	if u := cut.Usage(false); !u.Estimated || u.ImageOutput != 33_000 || u.Input < 3 {
		t.Errorf("cut stream %+v", u)
	}
	// Without usage, a GPT image model's reply is estimated, never free.
	u := meterOf(&Fields{N: 1, OutputBound: 33_000}, "application/json")([]byte(`{"created":1,"data":[{"b64_json":"AAAA"}]}`)).Usage(true)
	if !u.Estimated || u.ImageOutput != 33_000 {
		t.Errorf("no usage %+v", u)
	}
}

func TestParseRequest(t *testing.T) {
	body := formattest.Read(t, "request.json")
	req, err := Format{}.ParseRequest(body, "application/json")
	if err != nil {
		t.Fatal(err)
	}
	if own := req.Own.(*Fields); req.Model != "gpt-image-1" || req.Stream || req.Session == "" || *own != (Fields{N: 2, Pixels: 1024 * 1536}) {
		t.Fatalf("%+v %+v", req, req.Own)
	}
	req, err = Format{}.ParseRequest([]byte(`{"prompt":"x","stream":true,"partial_images":3,"size":"auto"}`), "application/json")
	if err != nil || req.Model != defaultModel || !req.Stream || *req.Own.(*Fields) != (Fields{N: 1, Partials: 3}) {
		t.Fatalf("defaults: %+v %+v %v", req, req.Own, err)
	}
	formattest.CheckRejects(t, Format{}.ParseRequest, []struct{ Name, Body, Param, Msg string }{
		{"no prompt", `{"model":"gpt-image-1"}`, "prompt", "required"},
		{"empty prompt", `{"model":"gpt-image-1","prompt":""}`, "prompt", "non-empty"},
		{"bad n", `{"model":"gpt-image-1","prompt":"x","n":11}`, "n", "1 to 10"},
		{"bad partials", `{"model":"gpt-image-1","prompt":"x","stream":true,"partial_images":4}`, "partial_images", "0 to 3"},
		{"bad size", `{"model":"gpt-image-1","prompt":"x","size":1024}`, "size", "string"},
		{"bad model", `{"model":"","prompt":"x"}`, "model", "non-empty"},
	})
}

// The hold covers the output of every image asked for, at its size and
// with its partial images, on the output side (image tokens are output),
// and n images for a model priced per image.
func TestBounds(t *testing.T) {
	cat, err := pricing.ParseCatalogue([]byte(`{
		"gpt-image-1": {"litellm_provider": "openai", "mode": "image_generation", "input_cost_per_token": 5e-06, "input_cost_per_image_token": 1e-05, "output_cost_per_image_token": 4e-05},
		"dall-e-3": {"litellm_provider": "openai", "mode": "image_generation", "input_cost_per_image": 0.04}
	}`), []string{"openai"}, []string{"image_generation"})
	if err != nil {
		t.Fatal(err)
	}
	tab, err := pricing.NewTable(cat, config.Models{Providers: []string{"openai"}})
	if err != nil {
		t.Fatal(err)
	}
	gpt, _ := tab.Lookup("gpt-image-1")
	own := &Fields{N: 2, Pixels: 4096 * 4096, Partials: 3}
	body := []byte(`{"prompt":"x"}`)
	b := Bounds(gpt, format.Request{Own: own}, body)
	perImage := int64(4096*4096/minPixelsPerToken + 3*partialImageTokens)
	if own.PerImage || b.Output != 2*perImage || b.Input != int64(len(body)) || b.Images != 2 {
		t.Errorf("gpt-image-1 bounds %+v own %+v", b, own)
	}
	if got, want := b.Hold(gpt), int64(len(body))*10_000+2*perImage*40_000; got != want {
		t.Errorf("hold %d, want %d (image input and output at their prices)", got, want)
	}
	dalle, _ := tab.Lookup("dall-e-3")
	own = &Fields{N: 3}
	b = Bounds(dalle, format.Request{Own: own}, body)
	if !own.PerImage || b.Hold(dalle) != 3*40_000_000 {
		t.Errorf("dall-e-3: own %+v hold %d", own, b.Hold(dalle))
	}
}

func FuzzMeter(f *testing.F) {
	for _, name := range []string{"reply.json", "stream.txt"} {
		rec := formattest.Read(f, name)
		f.Add(rec, uint16(len(rec)/2))
	}
	f.Fuzz(func(t *testing.T, reply []byte, i uint16) {
		for _, ct := range []string{"application/json", "text/event-stream"} {
			formattest.CheckSplitsAgree(t, reply, []uint16{i}, meterOf(&Fields{N: 1, OutputBound: 100}, ct), true, false)
		}
	})
}

func TestFoldedKeysRefused(t *testing.T) {
	formattest.CheckFoldedKeys(t, Format{}.ParseRequest, "application/json", requestQuery.Paths())
}

// A stream of n images carries one completed event per image, each with
// that image's usage: they add up. Cut after the first, the second is
// estimated at its share of the hold.
func TestMeterStreamOfImages(t *testing.T) {
	completed := func(in, out int) string {
		return `event: image_generation.completed` + "\n" +
			`data: {"type":"image_generation.completed","b64_json":"AAAC","usage":{"input_tokens":` + strconv.Itoa(in) +
			`,"input_tokens_details":{"image_tokens":0,"text_tokens":` + strconv.Itoa(in) + `},"output_tokens":` + strconv.Itoa(out) + `}}` + "\n\n"
	}
	first, second := completed(9, 1256), completed(9, 1056)
	own := func() *Fields { return &Fields{N: 2, Partials: 0, OutputBound: 2 * 33_000} }
	formattest.CheckStream(t, []byte(first+second), meterOf(own(), "text/event-stream"),
		usage.Report{Usage: usage.Usage{Input: 18, ImageOutput: 2312}})
	cut := meterOf(own(), "text/event-stream")([]byte(first))
	if u := cut.Usage(false); !u.Estimated || u.Input != 9 || u.ImageOutput != 1256+33_000 {
		t.Errorf("a stream cut after one of two images: %+v", u)
	}
}

// The meter's buffers are bounded: a JSON reply past format.MaxJSONBody
// (32 MB) and a stream event past maxEvent (16 MB) are not read, and the
// image they carried is estimated at its hold, never free; an event
// within the bound is read as reported.
func TestMeterBounds(t *testing.T) {
	usageJSON := `"usage":{"input_tokens":9,"input_tokens_details":{"image_tokens":0,"text_tokens":9},"output_tokens":1056}`
	image := func(size int) string { return strings.Repeat("A", size) }
	own := func() *Fields { return &Fields{N: 1, OutputBound: 33_000} }

	big := []byte(`{"created":1,"data":[{"b64_json":"` + image(format.MaxJSONBody) + `"}],` + usageJSON + `}`)
	if u := meterOf(own(), "application/json")(big[:len(big)/2], big[len(big)/2:]).Usage(true); !u.Estimated || u.ImageOutput != 33_000 {
		t.Errorf("a reply past %d bytes: %+v", format.MaxJSONBody, u)
	}
	event := func(size int) []byte {
		return []byte("event: image_generation.completed\ndata: {\"type\":\"image_generation.completed\",\"b64_json\":\"" + image(size) + "\"," + usageJSON + "}\n\n")
	}
	within := event(maxEvent - 1024)
	if u := meterOf(own(), "text/event-stream")(within[:len(within)/3], within[len(within)/3:]).Usage(true); u != (usage.Report{Usage: usage.Usage{Input: 9, ImageOutput: 1056}}) {
		t.Errorf("an event within %d bytes: %+v", maxEvent, u)
	}
	if u := meterOf(own(), "text/event-stream")(event(maxEvent)).Usage(true); !u.Estimated || u.ImageOutput != 33_000 {
		t.Errorf("an event past %d bytes: %+v", maxEvent, u)
	}
}
