package responses

import (
	"encoding/json"
	"strconv"

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

// ErrorEvent is the vendor's error event for an HTTP refusal: its status
// and its error object, {"type":"error","status":N,"error":{...}}.
func ErrorEvent(status int, body []byte) []byte {
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
	return append(out, '}')
}
