package images

import (
	"github.com/modelgateway/gateway/extproc/format"
	"github.com/modelgateway/gateway/extproc/jsonscan"
	"github.com/modelgateway/gateway/extproc/sse"
	"github.com/modelgateway/gateway/extproc/tokens"
	"github.com/modelgateway/gateway/internal/usage"
)

// NewMeter returns a meter for a reply: an event-stream meter for
// text/event-stream, otherwise one that reads the JSON reply at the end.
// The request body is kept for an estimate of the prompt.
func (Format) NewMeter(req format.Request, body []byte, contentType string) format.Meter {
	own, _ := req.Own.(*Fields)
	if own == nil {
		own = &Fields{N: 1}
	}
	if sse.IsEventStream(contentType) {
		return &streamMeter{own: own, body: body, dec: sse.Decoder{MaxEventSize: maxEvent}}
	}
	return &jsonMeter{own: own, body: body}
}

// maxEvent bounds a stream event the meter reads: a completed event
// carries the whole image, a few MB of base64.
const maxEvent = 16 << 20

// The paths a meter reads, in a JSON reply and in each stream event.
const (
	pType = iota
	pData
	pInput
	pImageIn
	pOutput
	pImageOut
)

var replyQuery = jsonscan.NewQuery(
	"type",
	"data[]",
	"usage.input_tokens",
	"usage.input_tokens_details.image_tokens",
	"usage.output_tokens",
	"usage.output_tokens_details.image_tokens",
)

// figures are the usage figures of one reply or one completed event.
type figures struct {
	input, imageIn, output, imageOut            int64
	haveInput, haveImageIn, haveOutput, haveOut bool
}

// visit reads the usage paths; it ignores the others.
func (f *figures) visit(path int, v jsonscan.Value) {
	n, ok := v.Int()
	ok = ok && n >= 0
	switch path {
	case pInput:
		f.input, f.haveInput = n, ok
	case pImageIn:
		f.imageIn, f.haveImageIn = n, ok
	case pOutput:
		f.output, f.haveOutput = n, ok
	case pImageOut:
		f.imageOut, f.haveOut = n, ok
	}
}

// add returns the usage the figures report: image input tokens (at most
// the input) as image input and the rest of the input as text; image
// output tokens as image output and the rest as text output, all of the
// output when the reply does not break it down (gpt-image-1 does not). ok
// is false without an input and an output figure.
func (f *figures) add(u *usage.Usage) (ok bool) {
	if !f.haveInput || !f.haveOutput {
		return false
	}
	in := min(f.imageIn, f.input)
	if !f.haveImageIn {
		in = 0
	}
	out := f.output
	if f.haveOut {
		out = min(f.imageOut, f.output)
	}
	u.Input += f.input - in
	u.ImageInput += in
	u.Output += f.output - out
	u.ImageOutput += out
	return true
}

// tally is what a meter read of a reply: the usage of the images that
// reported one, and the images seen.
type tally struct {
	usage  usage.Usage
	images int64 // images the reply carried (JSON data, completed events)
	priced int64 // images whose usage was read
}

// report turns the tally into the usage billed; ended says the reply was
// read to its end. A reply with the usage of every image it carried stands
// as reported; for a model priced per image the images it carried are
// counted. Anything else is estimated and flagged: each image without
// usage at the most it is held for, and the prompt, if no usage was read,
// at its tokens.
func (t *tally) report(own *Fields, ended bool, body []byte) usage.Report {
	r := usage.Report{Usage: t.usage}
	if own.PerImage && t.priced == 0 {
		r.Images = t.images
		if ended && t.images > 0 {
			return r
		}
		r.Images, r.Estimated = max(t.images, own.N), true
		return r
	}
	if ended && t.priced > 0 && t.priced == t.images {
		return r
	}
	r.Estimated = true
	missing := max(own.N-t.priced, 0)
	r.ImageOutput += missing * (own.OutputBound / max(own.N, 1))
	if t.priced == 0 {
		r.Input = estimatePrompt(body)
	}
	return r
}

// promptLimit bounds the prompt text tokenized for an estimate.
const promptLimit = 64 << 10

var promptQuery = jsonscan.NewQuery("prompt")

func estimatePrompt(body []byte) int64 {
	t := tokens.Tally{Limit: promptLimit}
	_ = promptQuery.Scan(body, func(_ int, v jsonscan.Value) error {
		if v.Kind == jsonscan.String {
			t.Write(v.AppendText(nil))
		}
		return nil
	})
	return t.Tokens()
}

// jsonMeter reads a JSON reply at its end.
type jsonMeter struct {
	format.JSONBuffer
	own  *Fields
	body []byte
}

func (m *jsonMeter) Usage(complete bool) usage.Report {
	var f figures
	var t tally
	err := replyQuery.Scan(m.Bytes(), func(path int, v jsonscan.Value) error {
		if path == pData {
			t.images++
		}
		f.visit(path, v)
		return nil
	})
	ended := err == nil && !m.Overflowed()
	if f.add(&t.usage) {
		t.images = max(t.images, 1)
		t.priced = t.images // one usage for the whole reply
	}
	return t.report(m.own, ended, m.body)
}

// streamMeter reads an image stream: image_generation.partial_image
// events, then one image_generation.completed event per image, each with
// that image's usage.
type streamMeter struct {
	own  *Fields
	body []byte
	dec  sse.Decoder
	t    tally
}

func (m *streamMeter) Write(p []byte) { m.dec.Feed(p, m.event) }

func (m *streamMeter) event(e sse.Event) {
	var f figures
	var completed bool
	err := replyQuery.Scan(e.Data, func(path int, v jsonscan.Value) error {
		if path == pType {
			completed = v.Equal("image_generation.completed")
		}
		f.visit(path, v)
		return nil
	})
	if err != nil || !completed {
		return // a partial image, a comment: nothing billed in it
	}
	m.t.images++
	if f.add(&m.t.usage) {
		m.t.priced++
	}
}

// Usage reports the completed events' usage. A stream is read to its end
// when it carried every image asked for; a finished stream is billed as
// reported whether or not the client saw its end.
func (m *streamMeter) Usage(complete bool) usage.Report {
	return m.t.report(m.own, m.t.images >= m.own.N, m.body)
}
