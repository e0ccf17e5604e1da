package transcriptions

import (
	"math"
	"strconv"

	"github.com/modelgateway/gateway/extproc/format"
	"github.com/modelgateway/gateway/extproc/jsonscan"
	"github.com/modelgateway/gateway/extproc/sse"
	"github.com/modelgateway/gateway/extproc/tokens"
	"github.com/modelgateway/gateway/internal/usage"
)

// NewMeter returns a meter for a reply: an event-stream meter for
// text/event-stream, otherwise one that reads the JSON reply at the end.
// The request body is not needed: an estimate comes from the upload's size
// (req.Own).
func (Format) NewMeter(req format.Request, _ []byte, contentType string) format.Meter {
	own, _ := req.Own.(*Fields)
	if own == nil {
		own = &Fields{}
	}
	if sse.IsEventStream(contentType) {
		return &streamMeter{own: own, text: format.ReplyText{Tally: tokens.Tally{Limit: streamTextLimit}}}
	}
	return &jsonMeter{own: own}
}

// streamTextLimit is the transcript text a stream meter holds for an
// estimate; see tokens.Tally.
const streamTextLimit = 8 << 10

// The paths a meter reads, in a JSON reply and in each stream event.
const (
	pType = iota
	pDelta
	pText
	pUsageType
	pInput
	pAudio
	pOutput
	pSeconds
	pDuration
)

var replyQuery = jsonscan.NewQuery(
	"type",
	"delta",
	"text",
	"usage.type",
	"usage.input_tokens",
	"usage.input_token_details.audio_tokens",
	"usage.output_tokens",
	"usage.seconds",
	"duration", // verbose_json's length of the audio, when usage has none
)

// figures are the usage figures read from a reply or its final event.
type figures struct {
	input, audio, output, seconds, duration   int64
	haveInput, haveAudio, haveOutput          bool
	haveSeconds, haveDuration, durationReport bool
}

// visit reads the usage paths; it ignores the others.
func (f *figures) visit(path int, v jsonscan.Value) {
	switch path {
	case pUsageType:
		f.durationReport = v.Equal("duration")
	case pInput:
		f.input, f.haveInput = count(v)
	case pAudio:
		f.audio, f.haveAudio = count(v)
	case pOutput:
		f.output, f.haveOutput = count(v)
	case pSeconds:
		f.seconds, f.haveSeconds = seconds(v)
	case pDuration:
		f.duration, f.haveDuration = seconds(v)
	}
}

// count reads a token count: a non-negative integer.
func count(v jsonscan.Value) (int64, bool) {
	n, ok := v.Int()
	return n, ok && n >= 0
}

// maxSeconds bounds a duration a reply may state: past it the figure is
// not a duration (a day of audio is far beyond any upload).
const maxSeconds = 1 << 40

// seconds reads a duration, which the vendor gives in fractional seconds,
// as whole seconds, a fraction rounded up: the gateway never bills less
// audio than the vendor reports.
func seconds(v jsonscan.Value) (int64, bool) {
	if v.Kind != jsonscan.Number {
		return 0, false
	}
	s, err := strconv.ParseFloat(string(v.Raw), 64)
	if err != nil || s < 0 || s > maxSeconds {
		return 0, false
	}
	return int64(math.Ceil(s)), true
}

// report turns the figures read into the usage billed. ended says the
// reply was read to its end (the JSON whole, the stream to its done
// event); text holds the transcript seen, for an output estimate.
//
// Token usage stands as reported when the reply ended with its input and
// output counts: audio tokens as audio input, the rest of the input
// (the prompt's text tokens) as input, output as output. A duration stands
// as reported when the reply ended with one (usage.seconds, else
// verbose_json's duration). Anything else is estimated and flagged: a
// model billed by duration (Fields.ByDuration) at the most the upload can
// hold, one billed per token at the most audio tokens the upload can hold
// (the processor caps them at the model's input window), plus the prompt
// at a token per byte and the output counted from the transcript seen.
func (f *figures) report(own *Fields, ended bool, text *tokens.Tally) usage.Report {
	var r usage.Report
	maxSecs := secondsBound(own.FileBytes)
	if f.haveInput && f.haveOutput && !f.durationReport {
		if f.haveAudio {
			r.AudioInput = min(f.audio, f.input)
		}
		r.Input, r.Output = f.input-r.AudioInput, f.output
		if ended {
			return r
		}
	}
	secs, have := f.seconds, f.haveSeconds
	if !have {
		secs, have = f.duration, f.haveDuration
	}
	if have && r == (usage.Report{}) {
		// More audio than the upload can hold is not believed.
		r.AudioSeconds = min(secs, maxSecs)
		if ended && secs <= maxSecs {
			return r
		}
	}
	r.Estimated = true
	if own.ByDuration {
		if !have {
			r.AudioSeconds = maxSecs
		}
		return r
	}
	if !f.haveInput {
		r.AudioInput, r.Input = audioTokenBound(own.FileBytes), own.PromptBytes
	}
	r.Output = max(r.Output, text.Tokens())
	return r
}

// jsonMeter reads a JSON reply (json, verbose_json, diarized_json) at its
// end.
type jsonMeter struct {
	format.JSONBuffer
	own *Fields
}

func (m *jsonMeter) Usage(complete bool) usage.Report {
	var f figures
	var text tokens.Tally
	err := replyQuery.Scan(m.Bytes(), func(path int, v jsonscan.Value) error {
		if path == pText && v.Kind == jsonscan.String {
			text.Write(v.AppendText(nil))
		}
		f.visit(path, v)
		return nil
	})
	return f.report(m.own, err == nil && !m.Overflowed(), &text)
}

// streamMeter reads a transcription stream: transcript.text.delta events,
// then one transcript.text.done event carrying the usage. The transcript
// is counted as it arrives, for an estimate should the done event not
// come.
type streamMeter struct {
	own  *Fields
	dec  sse.Decoder
	text format.ReplyText
	fig  figures
	done bool
}

func (m *streamMeter) Write(p []byte) {
	m.dec.Feed(p, m.event)
	m.text.Release()
}

func (m *streamMeter) event(e sse.Event) {
	if m.done {
		return
	}
	var f figures
	var delta jsonscan.Value
	var isDelta, isDone bool
	err := replyQuery.Scan(e.Data, func(path int, v jsonscan.Value) error {
		switch path {
		case pType:
			isDelta, isDone = v.Equal("transcript.text.delta"), v.Equal("transcript.text.done")
		case pDelta:
			delta = v
		default:
			f.visit(path, v)
		}
		return nil
	})
	if err != nil {
		return // not an event of the API ([DONE], a comment): nothing billed in it
	}
	switch {
	case isDelta:
		m.text.AddString(delta)
	case isDone:
		m.fig, m.done = f, true
	}
}

// Usage reports the done event's usage; a stream that ended without one
// is estimated. A finished stream is billed as reported whether or not
// the client saw its end.
func (m *streamMeter) Usage(complete bool) usage.Report {
	return m.fig.report(m.own, m.done, &m.text.Tally)
}
