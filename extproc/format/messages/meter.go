package messages

import (
	"github.com/modelgateway/gateway/extproc/format"
	"github.com/modelgateway/gateway/extproc/jsonscan"
	"github.com/modelgateway/gateway/extproc/sse"
	"github.com/modelgateway/gateway/extproc/tokens"
	"github.com/modelgateway/gateway/internal/usage"
)

// NewMeter returns a meter for a reply: an event-stream meter for
// text/event-stream, otherwise one that reads the JSON message at the end.
// body is kept, unmodified, for an input estimate should the reply report no
// input usage; the caller must not change it until Usage has been called.
func (Format) NewMeter(req format.Request, body []byte, contentType string) format.Meter {
	if sse.IsEventStream(contentType) {
		return &streamMeter{body: body, text: format.ReplyText{Tally: tokens.Tally{Limit: streamTextLimit, Ratio: tokens.MessagesRatio}}}
	}
	return &jsonMeter{body: body}
}

// streamTextLimit is the delta text a stream meter keeps for its output
// estimate; longer replies are extrapolated from it (see tokens.Tally).
// Together with the decoder's buffers, which hold one event, it keeps a
// stream's memory within about 20 KB.
const streamTextLimit = 8 << 10

// streamMeter reads the vendor's events:
//
//	message_start        message.model and message.usage (input, cache
//	                     reads and 5m/1h writes, service tier)
//	content_block_delta  text, partial_json or thinking: counted for estimates
//	message_delta        usage.output_tokens, cumulative, and
//	                     usage.server_tool_use.web_search_requests; newer
//	                     replies also repeat the input and cache figures here
//	message_stop         the reply is complete
//	error                the reply failed part way
//
// The vendor's input_tokens already excludes cache reads and writes.
type streamMeter struct {
	body []byte
	dec  sse.Decoder
	text format.ReplyText

	model                    string
	usage                    vendorUsage
	started, stopped, failed bool
	final                    bool // message_delta carried the final output count
}

const (
	evType = iota
	evModel
	evText
	evPartialJSON
	evThinking
	evStartUsage // uFields paths below message.usage
	evUsage      = evStartUsage + uFields
	evPaths      = evUsage + uFields
)

var eventQuery = jsonscan.NewQuery(append(append([]string{
	"type",
	"message.model",
	"delta.text",
	"delta.partial_json",
	"delta.thinking",
}, usagePathsUnder("message.usage.")...), usagePathsUnder("usage.")...)...)

func (m *streamMeter) Write(p []byte) { m.dec.Feed(p, m.event) }

func (m *streamMeter) event(ev sse.Event) {
	var vals [evPaths]jsonscan.Value
	err := eventQuery.Scan(ev.Data, func(path int, v jsonscan.Value) error {
		vals[path] = v
		return nil
	})
	if err != nil {
		return // not an event of this format: ignore it
	}
	// The data's type names the event; the event field is the fallback.
	typ := vals[evType]
	is := func(name string) bool {
		if typ.Kind == jsonscan.String {
			return typ.Equal(name)
		}
		return string(ev.Name) == name
	}
	switch {
	case is("content_block_delta"):
		for _, v := range vals[evText : evThinking+1] {
			m.text.AddString(v)
		}
		m.text.Release()
	case is("message_start"):
		m.started = true
		if m.model == "" && vals[evModel].Kind == jsonscan.String {
			m.model = vals[evModel].Text()
		}
		for i := range uFields {
			m.usage.set(i, vals[evStartUsage+i], false)
		}
	case is("message_delta"):
		if n, ok := vals[evUsage+uOutput].Int(); ok && n >= 0 {
			// The vendor's count of the whole reply: exact from here on,
			// even if the client leaves before message_stop.
			m.final = true
		}
		// output_tokens is cumulative; the other figures, when repeated,
		// replace message_start's zeros.
		for i := range uFields {
			m.usage.set(i, vals[evUsage+i], i != uOutput)
		}
	case is("message_stop"):
		m.stopped = true
	case is("error"):
		m.failed = true
	}
}

// Usage reports the vendor's figures once message_delta's final count has
// been seen with message_start's input, even if the body then failed to
// reach the client: the reply was generated in full. Otherwise it reports
// what was observed, with output raised to the tokens counted in the
// streamed text and, without a valid input figure, input estimated from the
// request, and marks the result estimated.
func (m *streamMeter) Usage(complete bool) usage.Report {
	u := m.usage.report()
	u.Model = usage.ReportedModel(m.model)
	// The final output count is message_delta's: message_start's is the
	// first token's.
	f := format.Final{Ended: m.started && (m.stopped || m.final) && !m.failed, Input: m.usage.seen[uInput], Output: m.final}
	return format.Settle(u, f, &m.text.Tally, func() int64 { return estimateInput(m.body) })
}

// jsonMeter buffers a non-streamed reply and reads it at the end.
type jsonMeter struct {
	format.JSONBuffer
	body []byte
}

const (
	msgModel = iota
	msgText
	msgThinking
	msgToolInput
	msgUsage // uFields paths below usage
)

var messageQuery = jsonscan.NewQuery(append([]string{
	"model",
	"content[].text",
	"content[].thinking",
	"content[].input",
}, usagePathsUnder("usage.")...)...)

// Usage reads model and usage from the message. A message that is cut
// short, oversized or without usage yields the figures found, with output
// raised to the tokens counted in its content and input estimated from the
// request if absent.
func (m *jsonMeter) Usage(complete bool) usage.Report {
	var vu vendorUsage
	var model string
	text := tokens.Tally{Limit: streamTextLimit, Ratio: tokens.MessagesRatio}
	err := messageQuery.Scan(m.Bytes(), func(path int, v jsonscan.Value) error {
		switch path {
		case msgModel:
			if v.Kind == jsonscan.String {
				model = v.Text()
			}
		case msgText, msgThinking:
			text.Write(v.AppendText(nil))
		case msgToolInput:
			text.Write(v.Raw)
		default:
			vu.set(path-msgUsage, v, false)
		}
		return nil
	})
	u := vu.report()
	u.Model = usage.ReportedModel(model)
	f := format.Final{Ended: err == nil && !m.Overflowed(), Input: vu.seen[uInput], Output: vu.seen[uOutput]}
	return format.Settle(u, f, &text, func() int64 { return estimateInput(m.body) })
}
