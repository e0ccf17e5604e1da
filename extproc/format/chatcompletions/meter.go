package chatcompletions

import (
	"github.com/modelgateway/gateway/extproc/format"
	"github.com/modelgateway/gateway/extproc/jsonscan"
	"github.com/modelgateway/gateway/extproc/sse"
	"github.com/modelgateway/gateway/extproc/tokens"
	"github.com/modelgateway/gateway/internal/usage"
)

// NewMeter returns a meter for a reply: a chunk-stream meter for
// text/event-stream, otherwise one that reads the JSON completion at the
// end. body is kept, unmodified, for an input estimate should the reply
// carry no usage; the caller must not change it until Usage has been called.
//
// For a stream whose request the gateway edited to ask for usage (see
// usageEdit), the meter is a format.Rewriter that gives the client the
// stream it asked for (see usageFilter).
func (Format) NewMeter(req format.Request, body []byte, contentType string) format.Meter {
	if sse.IsEventStream(contentType) {
		usageAdded := !req.IncludeUsage && !req.Edit.IsZero()
		// Without a usage chunk the output must be counted in full, so the
		// tally counts as the text arrives. Otherwise counting matters only
		// for a broken stream, and a cheaper extrapolated figure will do.
		m := streamMeter{
			body:      body,
			webSearch: req.WebSearch,
			text:      format.ReplyText{Tally: tokens.Tally{Limit: streamTextLimit, Eager: !req.IncludeUsage && !usageAdded}},
		}
		if usageAdded {
			return &usageFilter{streamMeter: m}
		}
		return &m
	}
	return &jsonMeter{body: body, webSearch: req.WebSearch}
}

// streamTextLimit is the delta text a stream meter holds; see tokens.Tally.
// Together with the decoder's buffers, which hold one chunk, it keeps a
// stream's memory within about 20 KB.
const streamTextLimit = 8 << 10

// streamMeter reads completion chunks, one JSON object per event, ending with
// "data: [DONE]". The usage chunk (usage non-null, choices usually empty)
// carries the figures; "usage": null in other chunks is ignored. Without it,
// the output is counted from the deltas' content, refusal and tool call
// arguments, and the input from the request.
type streamMeter struct {
	body []byte
	dec  sse.Decoder
	text format.ReplyText

	model                  string
	tier                   string
	webSearch              bool
	usage                  vendorUsage
	sawUsage, done, failed bool
}

const (
	chModel = iota
	chTier
	chContent
	chRefusal
	chReasoning
	chToolName
	chToolArgs
	chError
	chUsageMember
	chChoicesMember
	chUsage // uFields paths below usage
	chPaths = chUsage + uFields
)

var chunkQuery = jsonscan.NewQuery(append([]string{
	"model",
	"service_tier",
	"choices[].delta.content",
	"choices[].delta.refusal",
	"choices[].delta.reasoning_content",
	"choices[].delta.tool_calls[].function.name",
	"choices[].delta.tool_calls[].function.arguments",
	"error",
	"usage",
	"choices",
}, usagePaths[:]...)...)

var doneData = []byte("[DONE]")

func (m *streamMeter) Write(p []byte) { m.dec.Feed(p, m.event) }

func (m *streamMeter) event(ev sse.Event) { m.read(ev) }

// read meters one event. For a completion chunk it returns the chunk's
// top-level usage and choices values (Kind Invalid when absent), which
// alias ev.Data.
func (m *streamMeter) read(ev sse.Event) (usageMember, choices jsonscan.Value) {
	if string(ev.Data) == string(doneData) {
		m.done = true
		return
	}
	var vals [chPaths]jsonscan.Value // the last value seen on each path
	err := chunkQuery.Scan(ev.Data, func(path int, v jsonscan.Value) error {
		if path >= chContent && path <= chToolArgs {
			// Several choices may each carry text: count as they come.
			m.text.AddString(v)
			return nil
		}
		vals[path] = v
		return nil
	})
	m.text.Release()
	if err != nil {
		return usageMember, choices // not a chunk of this format: ignore it
	}
	if vals[chError].Kind == jsonscan.Object {
		m.failed = true
	}
	if m.model == "" && vals[chModel].Kind == jsonscan.String {
		m.model = vals[chModel].Text()
	}
	if m.tier == "" && vals[chTier].Kind == jsonscan.String {
		m.tier = vals[chTier].Text()
	}
	_, okPrompt := count(vals[chUsage+uPrompt])
	_, okCompletion := count(vals[chUsage+uCompletion])
	if okPrompt || okCompletion {
		m.sawUsage = true
		m.usage = vendorUsage{}
		for i := range uFields {
			m.usage.set(i, vals[chUsage+i])
		}
	}
	return vals[chUsageMember], vals[chChoicesMember]
}

// count returns a non-negative integer token count.
func count(v jsonscan.Value) (int64, bool) {
	n, ok := v.Int()
	if !ok || n < 0 {
		return 0, false
	}
	return n, true
}

// Usage reports the usage chunk's figures once it has arrived (it is the
// last chunk before [DONE]). Otherwise it reports what was observed, with
// output raised to the tokens counted in the deltas and input estimated from
// the request if no usage came, and marks the result estimated.
func (m *streamMeter) Usage(complete bool) usage.Report {
	// Before a usage chunk m.usage is zero: the web search, if any, stands.
	u := usage.Report{Usage: m.usage.usage(m.webSearch), Model: usage.ReportedModel(m.model), ServiceTier: m.tier}
	// The usage chunk is the stream's last: its figures are final even if
	// the client leaves before [DONE].
	f := format.Final{Ended: m.sawUsage && !m.failed, Input: m.usage.seen[uPrompt], Output: m.usage.seen[uCompletion]}
	return format.Settle(u, f, &m.text.Tally, func() int64 { return estimateInput(m.body) })
}

// jsonMeter buffers a non-streamed completion and reads it at the end.
type jsonMeter struct {
	format.JSONBuffer
	body      []byte
	webSearch bool
}

const (
	cmpModel = iota
	cmpTier
	cmpContent
	cmpRefusal
	cmpReasoning
	cmpToolName
	cmpToolArgs
	cmpUsage // uFields paths
)

var completionQuery = jsonscan.NewQuery(append([]string{
	"model",
	"service_tier",
	"choices[].message.content",
	"choices[].message.refusal",
	"choices[].message.reasoning_content",
	"choices[].message.tool_calls[].function.name",
	"choices[].message.tool_calls[].function.arguments",
}, usagePaths[:]...)...)

// Usage reads model, service tier and usage from the completion. One that is
// cut short, oversized or without usage yields the figures found, with
// output raised to the tokens counted in its messages and input estimated
// from the request if absent.
func (m *jsonMeter) Usage(complete bool) usage.Report {
	var u usage.Report
	var vu vendorUsage
	text := tokens.Tally{Limit: streamTextLimit}
	err := completionQuery.Scan(m.Bytes(), func(path int, v jsonscan.Value) error {
		switch {
		case path == cmpModel:
			if v.Kind == jsonscan.String {
				u.Model = usage.ReportedModel(v.Text())
			}
		case path == cmpTier:
			if v.Kind == jsonscan.String {
				u.ServiceTier = v.Text()
			}
		case path >= cmpUsage:
			vu.set(path-cmpUsage, v)
		default:
			if v.Kind == jsonscan.String {
				text.Write(v.AppendText(nil))
			}
		}
		return nil
	})
	u.Usage = vu.usage(m.webSearch)
	f := format.Final{Ended: err == nil && !m.Overflowed(), Input: vu.seen[uPrompt], Output: vu.seen[uCompletion]}
	return format.Settle(u, f, &text, func() int64 { return estimateInput(m.body) })
}
