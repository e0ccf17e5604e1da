package transcriptions

import (
	"bytes"
	"encoding/json"
	"errors"
	"mime/multipart"
	"strings"
	"testing"

	"github.com/modelgateway/gateway/extproc/format"
	"github.com/modelgateway/gateway/extproc/format/formattest"
	"github.com/modelgateway/gateway/extproc/operation"
	"github.com/modelgateway/gateway/internal/config"
	"github.com/modelgateway/gateway/internal/pricing"
	"github.com/modelgateway/gateway/internal/usage"
)

// form writes a multipart body of the given fields and, unless audio is
// nil, a file part; it returns the body and its content type.
func form(t testing.TB, audio []byte, fields ...string) ([]byte, string) {
	t.Helper()
	var b bytes.Buffer
	w := multipart.NewWriter(&b)
	for i := 0; i+1 < len(fields); i += 2 {
		if err := w.WriteField(fields[i], fields[i+1]); err != nil {
			t.Fatal(err)
		}
	}
	if audio != nil {
		fw, err := w.CreateFormFile("file", "speech.mp3")
		if err != nil {
			t.Fatal(err)
		}
		fw.Write(audio)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes(), w.FormDataContentType()
}

func TestParseRequest(t *testing.T) {
	audio := bytes.Repeat([]byte{0xff, 0xfb, 0x90, 0x00}, 2500)
	body, ct := form(t, audio, "model", "gpt-4o-transcribe", "stream", "true", "prompt", "Names: Ada, Grace.")
	req, err := Format{}.ParseRequest(body, ct)
	if err != nil {
		t.Fatal(err)
	}
	own, _ := req.Own.(*Fields)
	if req.Model != "gpt-4o-transcribe" || !req.Stream || req.HasMaxTokens || own == nil ||
		*own != (Fields{FileBytes: 10_000, PromptBytes: int64(len("Names: Ada, Grace.")), ResponseFormat: "json"}) {
		t.Fatalf("got %+v own %+v", req, own)
	}
	for _, rf := range []string{"json", "verbose_json", "diarized_json"} {
		body, ct := form(t, audio, "response_format", rf, "model", "whisper-1", "stream", "false", "language", "en")
		req, err := Format{}.ParseRequest(body, ct)
		if err != nil || req.Model != "whisper-1" || req.Stream || req.Own.(*Fields).ResponseFormat != rf {
			t.Fatalf("%s: %+v %v", rf, req, err)
		}
	}
}

func TestParseRequestRejects(t *testing.T) {
	audio := []byte("ID3 audio")
	good, ct := form(t, audio, "model", "m")
	twoFiles := func() ([]byte, string) {
		var b bytes.Buffer
		w := multipart.NewWriter(&b)
		w.WriteField("model", "m")
		for range 2 {
			fw, _ := w.CreateFormFile("file", "a.mp3")
			fw.Write(audio)
		}
		w.Close()
		return b.Bytes(), w.FormDataContentType()
	}
	twoBody, twoCT := twoFiles()
	type bodyType struct {
		body        []byte
		contentType string
	}
	fc := func(b []byte, ct string) bodyType { return bodyType{b, ct} }
	cases := []struct {
		name string
		bodyType
		param, msg string
	}{
		{"json body", bodyType{[]byte(`{"model":"m"}`), "application/json"}, "", "multipart/form-data"},
		{"no boundary", bodyType{good, "multipart/form-data"}, "", "boundary"},
		{"other boundary", bodyType{good, "multipart/form-data; boundary=nope"}, "", "not a valid multipart"},
		{"cut short", bodyType{good[:len(good)/2], ct}, "", "not a valid multipart"},
		{"no closing boundary", bodyType{good[:bytes.LastIndex(good, []byte("--"+ct[strings.Index(ct, "=")+1:]))], ct}, "", "not a valid multipart"},
		{"empty", bodyType{nil, ct}, "", "not a valid multipart"},
		{"no model", fc(form(t, audio)), "model", "required"},
		{"empty model", fc(form(t, audio, "model", "")), "model", "non-empty"},
		{"no file", fc(form(t, nil, "model", "m")), "file", "required"},
		{"two files", bodyType{twoBody, twoCT}, "file", "only one"},
		{"two models", fc(form(t, audio, "model", "m", "model", "n")), "model", "more than once"},
		{"bad stream", fc(form(t, audio, "model", "m", "stream", "yes")), "stream", "true or false"},
		{"text", fc(form(t, audio, "model", "whisper-1", "response_format", "text")), "response_format", "no usage"},
		{"srt", fc(form(t, audio, "model", "whisper-1", "response_format", "srt")), "response_format", "no usage"},
		{"vtt", fc(form(t, audio, "model", "whisper-1", "response_format", "vtt")), "response_format", "no usage"},
		{"long model", fc(form(t, audio, "model", strings.Repeat("m", fieldLimit+1))), "model", "longer than"},
	}
	for _, c := range cases {
		_, err := Format{}.ParseRequest(c.body, c.contentType)
		var fe *format.Error
		if !errors.As(err, &fe) || fe.Kind != format.InvalidRequest || fe.Param != c.param || !strings.Contains(fe.Message, c.msg) {
			t.Errorf("%s: got %v; want a 400 on %q containing %q", c.name, err, c.param, c.msg)
		}
	}
}

// The error body is OpenAI's error JSON, naming the parameter.
func TestErrorBody(t *testing.T) {
	var e struct {
		Error struct{ Type, Message, Param string }
	}
	if err := json.Unmarshal(Format{}.ErrorBody(format.Invalid("file", "file: field required")), &e); err != nil {
		t.Fatal(err)
	}
	if e.Error.Type != "invalid_request_error" || e.Error.Param != "file" || e.Error.Message != "file: field required" {
		t.Fatalf("error body %+v", e)
	}
}

func meterOf(own *Fields, contentType string) func(chunks ...[]byte) format.Meter {
	return func(chunks ...[]byte) format.Meter {
		return formattest.Feed(Format{}.NewMeter(format.Request{Own: own}, nil, contentType), chunks...)
	}
}

// Recorded replies are billed as reported, cut anywhere: audio tokens as
// audio input, the prompt's text tokens as input; a duration in whole
// seconds, a fraction rounded up.
func TestMeter(t *testing.T) {
	own := &Fields{FileBytes: 1 << 20}
	formattest.CheckJSON(t, formattest.Read(t, "reply-tokens.json"), meterOf(own, "application/json"),
		usage.Report{Usage: usage.Usage{Input: 12, AudioInput: 171, Output: 21}})
	formattest.CheckJSON(t, formattest.Read(t, "reply-duration.json"), meterOf(own, "application/json"),
		usage.Report{Usage: usage.Usage{AudioSeconds: 8}})
	formattest.CheckJSON(t, formattest.Read(t, "reply-verbose.json"), meterOf(own, "application/json"),
		usage.Report{Usage: usage.Usage{AudioSeconds: 9}})
	formattest.CheckStream(t, formattest.Read(t, "stream.txt"), meterOf(own, "text/event-stream"),
		usage.Report{Usage: usage.Usage{AudioInput: 44, Output: 7}})
}

// A reply without usage is estimated, flagged, and never free: in seconds
// for a model billed by duration, in tokens otherwise, from the upload's
// size; the output from the transcript seen.
func TestMeterEstimates(t *testing.T) {
	const size = 100_000 // 200 seconds at most, 10,000 audio tokens
	stream := formattest.Read(t, "stream.txt")
	cut := stream[:bytes.Index(stream, []byte(`data: {"type":"transcript.text.done"`))]
	u := meterOf(&Fields{FileBytes: size, PromptBytes: 7}, "text/event-stream")(cut).Usage(false)
	if !u.Estimated || u.AudioInput != 10_000 || u.Input != 7 || u.Output < 3 || u.AudioSeconds != 0 {
		t.Errorf("stream cut short: %+v", u)
	}
	u = meterOf(&Fields{FileBytes: size, ByDuration: true}, "application/json")([]byte(`{"text":"Hello there."}`)).Usage(true)
	if !u.Estimated || u.AudioSeconds != 200 || u.Input+u.AudioInput+u.Output != 0 {
		t.Errorf("duration model without usage: %+v", u)
	}
	u = meterOf(&Fields{FileBytes: size}, "application/json")([]byte(`{"text":"Hello there, general.","usage":{"type":"tok`)).Usage(false)
	if !u.Estimated || u.AudioInput != 10_000 || u.Output == 0 {
		t.Errorf("token model cut short: %+v", u)
	}
	// A duration beyond what the upload can hold is not believed.
	u = meterOf(&Fields{FileBytes: size, ByDuration: true}, "application/json")([]byte(`{"text":"x","usage":{"type":"duration","seconds":86400}}`)).Usage(true)
	if !u.Estimated || u.AudioSeconds != 200 {
		t.Errorf("claimed a day: %+v", u)
	}
	// Figures that are not counts are not usage.
	u = meterOf(&Fields{FileBytes: size}, "application/json")([]byte(`{"text":"x","usage":{"type":"tokens","input_tokens":-1,"output_tokens":"5"}}`)).Usage(true)
	if !u.Estimated || u.AudioInput != 10_000 {
		t.Errorf("bad figures: %+v", u)
	}
}

func models(t *testing.T) (transcribe, whisper, own *pricing.Model) {
	t.Helper()
	cat, err := pricing.ParseCatalogue([]byte(`{
	"gpt-4o-transcribe": {"litellm_provider": "openai", "mode": "audio_transcription", "max_input_tokens": 16000, "max_output_tokens": 2000,
		"input_cost_per_token": 2.5e-06, "input_cost_per_audio_token": 2.5e-06, "output_cost_per_token": 1e-05, "input_cost_per_second": 0.0001},
	"whisper-1": {"litellm_provider": "openai", "mode": "audio_transcription", "input_cost_per_second": 0.0001, "output_cost_per_second": 0.0001}
}`), []string{"openai"}, []string{"audio_transcription"})
	if err != nil {
		t.Fatal(err)
	}
	in, out := 1.0, 2.0
	tab, err := pricing.NewTable(cat, config.Models{Providers: []string{"openai"},
		Overrides: map[string]config.Price{"own-transcriber": {Input: &in, Output: &out, MaxOutput: 500}}})
	if err != nil {
		t.Fatal(err)
	}
	transcribe, _ = tab.Lookup("gpt-4o-transcribe")
	whisper, _ = tab.Lookup("whisper-1")
	own, _ = tab.Lookup("own-transcriber")
	return transcribe, whisper, own
}

// The hold comes from the upload's size and the model's limits, never
// from the body's bytes as text tokens.
func TestBounds(t *testing.T) {
	transcribe, whisper, ownModel := models(t)
	const size = 1_000_000 // at most 2,000 seconds, 100,000 audio tokens
	body := make([]byte, size+500)
	bounds := func(m *pricing.Model, f *Fields) operation.Bounds {
		return Operation.RequestBounds(m, format.Request{Model: string(m.Name), Own: f}, body)
	}

	f := &Fields{FileBytes: size}
	if b := bounds(whisper, f); b != (operation.Bounds{Seconds: 2000}) || !f.ByDuration {
		t.Errorf("whisper-1: %+v, by duration %v", b, f.ByDuration)
	}
	// 2,000 s at 1e-4 USD: 0.2 USD.
	if h := bounds(whisper, f).Hold(whisper); h != 200_000_000 {
		t.Errorf("whisper-1 hold %d", h)
	}
	f = &Fields{FileBytes: size, PromptBytes: 100}
	if b := bounds(transcribe, f); b != (operation.Bounds{Input: 16000, Output: 2000}) || f.ByDuration {
		t.Errorf("gpt-4o-transcribe: %+v", b)
	}
	// A short clip holds less than the window.
	if b := bounds(transcribe, &Fields{FileBytes: 5000, PromptBytes: 100}); b.Input != 10*50+100 {
		t.Errorf("short clip: %+v", b)
	}
	// A model the catalogue does not list: no window, its own max output.
	if b := bounds(ownModel, &Fields{FileBytes: size}); b != (operation.Bounds{Input: 100_000, Output: 500}) {
		t.Errorf("own model: %+v", b)
	}
	if b := bounds(transcribe, &Fields{FileBytes: 5000}); b.Input >= int64(len(body)) {
		t.Errorf("held the body as text: %+v", b)
	}

	// Whatever a reply within the bounds reports, the hold covers it.
	hold := bounds(transcribe, &Fields{FileBytes: size}).Hold(transcribe)
	if c := transcribe.Price(usage.Usage{AudioInput: 15000, Input: 1000, Output: 2000}, "", "").Cost; c > hold {
		t.Errorf("cost %d above hold %d", c, hold)
	}
}

func FuzzMeter(f *testing.F) {
	for _, name := range []string{"reply-tokens.json", "reply-duration.json", "stream.txt"} {
		rec := formattest.Read(f, name)
		f.Add(rec, uint16(len(rec)/2), name == "stream.txt")
	}
	f.Fuzz(func(t *testing.T, reply []byte, i uint16, stream bool) {
		ct := "application/json"
		if stream {
			ct = "text/event-stream"
		}
		formattest.CheckSplitsAgree(t, reply, []uint16{i}, meterOf(&Fields{FileBytes: 4096}, ct), true, false)
	})
}

func FuzzParseRequest(f *testing.F) {
	body, ct := form(f, []byte("audio"), "model", "m", "stream", "true")
	f.Add(body)
	boundary := ct[strings.Index(ct, "=")+1:]
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := Format{}.ParseRequest(body, "multipart/form-data; boundary="+boundary)
		var fe *format.Error
		if err != nil && !errors.As(err, &fe) {
			t.Fatalf("error %v is not a *format.Error", err)
		}
		if err == nil && (req.Model == "" || req.Own.(*Fields).FileBytes > int64(len(body))) {
			t.Fatalf("accepted %+v", req)
		}
	})
}

func TestFoldedPartNamesRefused(t *testing.T) {
	audio := []byte{0xff, 0xfb, 0x90, 0x00}
	var n int
	for name := range parts {
		for _, folded := range formattest.FoldedKeys(name) {
			if strings.Contains(folded, `\`) {
				continue // a JSON escape: a part name is not JSON
			}
			n++
			// The folded part is sent beside a valid form, after it.
			body, ct := form(t, audio, "model", "gpt-4o-transcribe", folded, "x")
			_, err := Format{}.ParseRequest(body, ct)
			var re *format.Error
			if !errors.As(err, &re) || re.Kind != format.InvalidRequest || re.Param != name || !strings.Contains(re.Message, "only in case") {
				t.Errorf("part %q: got %v, want a 400 on %s", folded, err, name)
			}
		}
	}
	if n < 3*len(parts) {
		t.Fatalf("only %d folded names tried", n)
	}
	// Names that are not a folding of one read pass through unread.
	body, ct := form(t, audio, "model", "gpt-4o-transcribe", "language", "en", "models", "x", "temperature", "0")
	if _, err := (Format{}).ParseRequest(body, ct); err != nil {
		t.Fatal(err)
	}
}
