package responses

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"

	"github.com/modelgateway/gateway/extproc/operation"
)

// Socket is the Responses API's WebSocket transport: GET /v1/responses
// upgraded, a response.create message per response, its reply the events
// of a stream; an error is an event of its own, which leaves the socket
// open.
var Socket = operation.Socket{
	Path:       "/v1/responses",
	Create:     "response.create",
	Error:      "error",
	Ends:       []string{"response.completed", "response.incomplete", "response.failed", "error"},
	ErrorEvent: ErrorEvent,
}

// ErrorEvent is the vendor's error event for an HTTP refusal: its status,
// its error object and the headers an HTTP client would have read,
// {"type":"error","status":N,"error":{...},"headers":{...}}. Codex reads
// the event's headers as an HTTP reply's (retry-after, x-should-retry),
// as the gateway reads a vendor's (TestSocketErrorEventsBlameTheKey).
func ErrorEvent(status int, header http.Header, body []byte) []byte {
	var e struct {
		Error json.RawMessage `json:"error"`
	}
	if json.Unmarshal(body, &e) != nil || len(e.Error) == 0 {
		e.Error = json.RawMessage(`{"type":"server_error","code":null,"message":"the gateway refused the response","param":null}`)
	}
	out := []byte(`{"type":"error","status":`)
	out = strconv.AppendInt(out, int64(status), 10)
	out = append(out, `,"error":`...)
	out = append(out, e.Error...)
	advice := make(map[string]string, len(header))
	for k := range header {
		// The body's type is the event's own; the rest is advice.
		if !strings.EqualFold(k, "Content-Type") {
			advice[strings.ToLower(k)] = header.Get(k)
		}
	}
	if len(advice) > 0 {
		h, _ := json.Marshal(advice) // sorted by name
		out = append(out, `,"headers":`...)
		out = append(out, h...)
	}
	return append(out, '}')
}
