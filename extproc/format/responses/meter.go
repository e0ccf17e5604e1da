package responses

import (
	"github.com/modelgateway/gateway/extproc/format"
	"github.com/modelgateway/gateway/extproc/jsonscan"
	"github.com/modelgateway/gateway/extproc/sse"
	"github.com/modelgateway/gateway/extproc/tokens"
	"github.com/modelgateway/gateway/internal/usage"
)

// NewMeter returns a meter for a reply: an event-stream meter for
// text/event-stream, otherwise one that reads the JSON response at the end.
// body is kept, unmodified, for an input estimate should the reply carry no
// usage; the caller must not change it until Usage has been called. Both
// meters implement format.Stored and format.StoredItems.
func (Format) NewMeter(req format.Request, body []byte, contentType string) format.Meter {
	if sse.IsEventStream(contentType) {
		return &streamMeter{body: body, text: format.ReplyText{Tally: tokens.Tally{Limit: streamTextLimit}}}
	}
	return &jsonMeter{body: body}
}

// streamTextLimit is the text a stream meter keeps for its output estimate;
// longer replies are extrapolated from it (see tokens.Tally).
const streamTextLimit = 8 << 10

// final reports whether a response status is one the response never leaves.
func final(status jsonscan.Value) bool {
	return status.Equal("completed") || status.Equal("incomplete") || status.Equal("failed") || status.Equal("cancelled")
}

// streamMeter reads the vendor's events, one JSON object per event whose
// "type" names it:
//
//	response.created, .in_progress, .queued   response.id, response.model
//	response.output_item.added / .done        item.type: built-in tool calls
//	response.*.delta                          text, counted for estimates
//	response.completed, .incomplete, .failed  the final response: usage,
//	                                          service tier, every output item
//	error                                     the reply failed part way
//
// Usage, the service tier and the tool calls come from the terminal event's
// response, whichever of the three it is; before it, the stream is
// estimated.
type streamMeter struct {
	body []byte
	dec  sse.Decoder
	text format.ReplyText

	id, model, tier string
	usage           vendorUsage
	calls           toolCalls // from the terminal event's output items
	seenCalls       toolCalls // from output_item.done events, for a cut stream
	terminal        bool
	failed          bool // an error event

	items   itemIDs          // the response's output items
	outputs []jsonscan.Value // an event's response.output[].id, reused
}

const (
	evType = iota
	evID
	evModel
	evTier
	evStatus
	evOutputType
	evOutputContainer
	evOutputItem
	evItemType
	evItemContainer
	evItemID
	evOutputID
	evDelta
	evUsage // uFields paths below response.usage
	evPaths = evUsage + uFields
)

var eventQuery = jsonscan.NewQuery(append([]string{
	"type",
	"response.id",
	"response.model",
	"response.service_tier",
	"response.status",
	"response.output[].type",
	"response.output[].container_id",
	"response.output[]",
	"item.type",
	"item.container_id",
	"item.id",
	"response.output[].id",
	"delta",
}, usagePathsUnder("response.usage.")...)...)

func (m *streamMeter) Write(p []byte) { m.dec.Feed(p, m.event) }

func (m *streamMeter) event(ev sse.Event) {
	var vals [evPaths]jsonscan.Value
	var calls toolCalls
	var typ, container jsonscan.Value
	m.outputs = m.outputs[:0]
	err := eventQuery.Scan(ev.Data, func(path int, v jsonscan.Value) error {
		switch path {
		case evOutputID:
			m.outputs = append(m.outputs, v)
		case evOutputType:
			typ = v
		case evOutputContainer:
			container = v
		case evOutputItem:
			calls.item(typ, container)
			typ, container = jsonscan.Value{}, jsonscan.Value{}
		default:
			vals[path] = v
		}
		return nil
	})
	if err != nil {
		return // not an event of this format: ignore it
	}
	t := vals[evType]
	if t.Kind != jsonscan.String {
		return
	}
	if m.id == "" && vals[evID].Kind == jsonscan.String {
		m.id = vals[evID].Text()
	}
	if m.model == "" && vals[evModel].Kind == jsonscan.String {
		m.model = vals[evModel].Text()
	}
	for _, id := range m.outputs {
		m.items.add(id)
	}
	switch {
	case t.Equal("response.completed") || t.Equal("response.incomplete") || t.Equal("response.failed"):
		m.terminal = true
		m.calls = calls
		if vals[evTier].Kind == jsonscan.String {
			m.tier = vals[evTier].Text()
		}
		for i := range uFields {
			m.usage.set(i, vals[evUsage+i])
		}
	case t.Equal("response.output_item.added"):
		m.items.add(vals[evItemID])
	case t.Equal("response.output_item.done"):
		m.items.add(vals[evItemID])
		m.seenCalls.item(vals[evItemType], vals[evItemContainer])
	case t.Equal("error"):
		m.failed = true
	case vals[evDelta].Kind == jsonscan.String:
		// output_text, refusal, reasoning, reasoning summary and
		// function-call argument deltas alike.
		m.text.AddString(vals[evDelta])
		m.text.Release()
	}
}

// Response implements format.Stored.
func (m *streamMeter) Response() (string, bool) { return m.id, m.terminal }

// Items implements format.StoredItems: the output items the stream has
// shown so far.
func (m *streamMeter) Items() []string { return m.items }

// Usage reports the terminal event's figures once it has arrived, even if
// the client then left: the response was generated in full. Before it,
// the stream was cut: the tool calls seen so far, output raised to the
// tokens counted in the deltas and input estimated from the request, marked
// estimated.
func (m *streamMeter) Usage(complete bool) usage.Report {
	r := usage.Report{Model: usage.ReportedModel(m.model), ServiceTier: m.tier}
	if m.terminal {
		r.Usage = m.usage.usage()
		m.calls.add(&r.Usage)
	} else {
		m.seenCalls.add(&r.Usage)
	}
	// The terminal event is the vendor's final word, usage or none (a
	// response that failed before any work reports none).
	whole := m.terminal && !m.failed
	return format.EstimateGaps(r, whole, m.terminal && m.usage.seen[uInput], &m.text.Tally, func() int64 { return estimateInput(m.body) })
}

// jsonMeter buffers a non-streamed response (or compaction) and reads it at
// the end.
type jsonMeter struct {
	format.JSONBuffer
	body []byte

	scanned int // 1 + the reply bytes the fields below were read from (-1 after an overflow); 0: none
	id      string
	status  bool // the response is in a final state
	items   itemIDs
	report  usage.Report
	whole   bool
}

const (
	rID = iota
	rModel
	rTier
	rStatus
	rObject
	rOutputType
	rOutputContainer
	rOutputItem
	rText
	rSummary
	rArguments
	rOutputID
	rUsage // uFields paths below usage
)

var responseQuery = jsonscan.NewQuery(append([]string{
	"id",
	"model",
	"service_tier",
	"status",
	"object",
	"output[].type",
	"output[].container_id",
	"output[]",
	"output[].content[].text",
	"output[].summary[].text",
	"output[].arguments",
	"output[].id",
}, usagePathsUnder("usage.")...)...)

// scan reads the buffered reply, again only if more of it has arrived
// since (a checkpoint reads it part way).
func (m *jsonMeter) scan() {
	n := len(m.Bytes())
	if m.Overflowed() {
		n = -2
	}
	if m.scanned == n+1 {
		return
	}
	m.scanned = n + 1
	m.report = usage.Report{}
	var vu vendorUsage
	var calls toolCalls
	var typ, container, status, object jsonscan.Value
	var outputs []jsonscan.Value
	text := tokens.Tally{Limit: streamTextLimit}
	u := &m.report
	err := responseQuery.Scan(m.Bytes(), func(path int, v jsonscan.Value) error {
		switch path {
		case rID:
			if v.Kind == jsonscan.String {
				m.id = v.Text()
			}
		case rModel:
			if v.Kind == jsonscan.String {
				u.Model = usage.ReportedModel(v.Text())
			}
		case rTier:
			if v.Kind == jsonscan.String {
				u.ServiceTier = v.Text()
			}
		case rStatus:
			status = v
		case rObject:
			object = v
		case rOutputType:
			typ = v
		case rOutputContainer:
			container = v
		case rOutputItem:
			calls.item(typ, container)
			typ, container = jsonscan.Value{}, jsonscan.Value{}
		case rOutputID:
			outputs = append(outputs, v)
		case rText, rSummary, rArguments:
			if v.Kind == jsonscan.String {
				text.Write(v.AppendText(nil))
			}
		default:
			vu.set(path-rUsage, v)
		}
		return nil
	})
	// A compaction has no status: its reply is final by being there.
	m.status = final(status) || object.Equal("response.compaction")
	u.Usage = vu.usage()
	calls.add(&u.Usage)
	// A final response without usage (one that failed before any work)
	// bills what it reports: nothing.
	m.whole = err == nil && !m.Overflowed() && (vu.complete() || m.status)
	m.items = m.items[:0]
	if err != nil {
		m.id, m.status = "", false // what a broken reply says is not trusted
	} else {
		for _, id := range outputs {
			m.items.add(id)
		}
	}
	*u = format.EstimateGaps(*u, m.whole, vu.seen[uInput], &text, func() int64 { return estimateInput(m.body) })
}

// Response implements format.Stored; it reads the reply, so call it after the
// last chunk.
func (m *jsonMeter) Response() (string, bool) {
	m.scan()
	return m.id, m.status
}

// Items implements format.StoredItems; it reads the reply, so call it
// after the last chunk.
func (m *jsonMeter) Items() []string {
	m.scan()
	return m.items
}

// itemIDs are the ids of a reply's output items, without repeats and at
// most format.MaxItems of them; an id that is not a valid one is left out.
type itemIDs []string

func (ids *itemIDs) add(v jsonscan.Value) {
	if v.Kind != jsonscan.String || len(*ids) == format.MaxItems {
		return
	}
	for _, id := range *ids {
		if v.Equal(id) {
			return
		}
	}
	if id := v.Text(); ValidID(id) {
		*ids = append(*ids, id)
	}
}

// Usage reads model, service tier, usage and tool calls from the response.
// One that is cut short, oversized or without usage yields the figures
// found, with output raised to the tokens counted in its output and input
// estimated from the request if absent.
func (m *jsonMeter) Usage(complete bool) usage.Report {
	m.scan()
	return m.report
}
