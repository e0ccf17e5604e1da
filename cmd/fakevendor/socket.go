package main

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/coder/websocket"
)

// The Responses API's WebSocket transport: GET /v1/responses upgraded, then
// one response per response.create message, its events those of a stream,
// one JSON message each. The controls are read again for each response
// (those a x-fake-controls header of the handshake set apply to every
// response of the socket): usage as for a stream, event_delay_ms and
// first_event_delay_ms pace the events, abort_after_events closes the
// connection without a close frame after that many events of a response,
// hang leaves a response without any event until the controls stop
// hanging (then the connection drops). A previous_response_id must name a
// response the socket's key stored or one created earlier on the same
// socket (store: false included); else the vendor's error event previous_response_not_found,
// and the socket stays open. Errors are events: {"type":"error",
// "status":N,"error":{...}}.
func (b *chatAPI) responsesSocket(w http.ResponseWriter, r *http.Request, _ []byte, first *Controls) {
	var perSocket *controlUpdate
	if v := r.Header.Get("x-fake-controls"); v != "" {
		perSocket = &controlUpdate{}
		json.Unmarshal([]byte(v), perSocket) // checked by the site already
	}
	c, err := websocket.Accept(w, r, &websocket.AcceptOptions{InsecureSkipVerify: true})
	if err != nil {
		return
	}
	defer c.CloseNow()
	c.SetReadLimit(maxBody)
	ctx := r.Context()
	local := map[string]bool{}
	for {
		typ, data, err := c.Read(ctx)
		if err != nil {
			return
		}
		if typ != websocket.MessageText {
			c.Close(websocket.StatusUnsupportedData, "text only")
			return
		}
		var ev struct {
			Type string `json:"type"`
		}
		if json.Unmarshal(data, &ev) != nil {
			c.Close(websocket.StatusInvalidFramePayloadData, "invalid JSON")
			return
		}
		if ev.Type != "response.create" {
			socketError(ctx, c, 400, "invalid_request_error", "unsupported_event_type", "Unsupported event type '"+ev.Type+"'.")
			continue
		}
		ctl := b.fake.chatCompletionsCtl.get()
		if perSocket != nil {
			perSocket.apply(&ctl)
		}
		b.fake.records.add(Record{Name: b.fake.cfg.name, Format: "chat_completions", Method: "WS", Host: r.Host,
			Path: r.URL.Path, Headers: r.Header.Clone(), Body: data, At: time.Now()})
		b.fake.chatCompletionsCount.requests.Add(1)
		if unhang, ok := b.fake.chatCompletionsCtl.hang(); ok {
			select {
			case <-ctx.Done():
			case <-unhang:
			}
			return // dropped without a close frame
		}
		if !b.socketResponse(ctx, c, r, data, &ctl, local) {
			return
		}
	}
}

// socketResponse answers one response.create; false: the connection was
// cut (abort_after_events) or broke.
func (b *chatAPI) socketResponse(ctx context.Context, c *websocket.Conn, r *http.Request, data []byte, ctl *Controls, local map[string]bool) bool {
	var req respRequest
	if err := json.Unmarshal(data, &req); err != nil || req.Model == "" {
		return socketError(ctx, c, 400, "invalid_request_error", "missing_required_parameter", "Missing required parameter: 'model'.")
	}
	if req.Background {
		return socketError(ctx, c, 400, "invalid_request_error", "invalid_request", "background is not supported over WebSocket.")
	}
	if req.PreviousResponseID != "" && !local[req.PreviousResponseID] {
		if prev, ok := b.stored.get(req.PreviousResponseID); !ok || !prev.readBy(requestKey(r)) {
			return socketError(ctx, c, 400, "invalid_request_error", "previous_response_not_found",
				"Previous response with id '"+req.PreviousResponseID+"' not found.")
		}
	}
	store := req.Store == nil || *req.Store
	var tool *toolCall
	for _, t := range req.Tools {
		if t.Type == "function" && t.Name != "" {
			tool = &toolCall{name: t.Name, arguments: toolArguments(t.Parameters)}
			break
		}
	}
	rp := planReply(data, inputMessages(req.Input), req.MaxOutputTokens, tool, ctl)
	b.fake.chatCompletionsUsage.bill(r, req.Model, rp.billed())
	id := b.fake.ids.next("resp_")
	final, events := b.buildResponse(&req, rp, id, ctl, store)
	local[id] = true
	if store {
		sr := newStoredResponse(final, events)
		sr.input, sr.owner = inputItems(req.Input), requestKey(r)
		b.stored.put(id, sr)
	}
	for i, ev := range events {
		d := time.Duration(ctl.EventDelayMS) * time.Millisecond
		if i == 0 {
			d = time.Duration(ctl.FirstEventDelayMS) * time.Millisecond
		}
		if d > 0 {
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return false
			}
		}
		// The benchmark reads when the fake sent each event.
		if err := c.Write(ctx, websocket.MessageText, withSentAt(ev)); err != nil {
			return false
		}
		if ctl.AbortAfterEvents > 0 && i+1 >= ctl.AbortAfterEvents {
			return false // the deferred CloseNow drops the connection
		}
	}
	return true
}

// withSentAt adds "sent_unix_nano" to an event, which clients ignore and
// the benchmark reads.
func withSentAt(ev []byte) []byte {
	out := make([]byte, 0, len(ev)+40)
	out = append(out, `{"sent_unix_nano":`...)
	out = strconv.AppendInt(out, time.Now().UnixNano(), 10)
	out = append(out, ',')
	return append(out, ev[1:]...)
}

// socketError sends the vendor's error event; the socket stays open.
func socketError(ctx context.Context, c *websocket.Conn, status int, typ, code, msg string) bool {
	ev, _ := json.Marshal(map[string]any{"type": "error", "status": status,
		"error": map[string]any{"type": typ, "code": code, "message": msg, "param": nil}})
	return c.Write(ctx, websocket.MessageText, ev) == nil
}
