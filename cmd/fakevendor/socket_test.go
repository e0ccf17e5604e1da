package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

func dialFake(t *testing.T, tf *testFake) *websocket.Conn {
	t.Helper()
	c, resp, err := websocket.Dial(context.Background(), "ws"+strings.TrimPrefix(tf.chatCompletions.URL, "http")+"/v1/responses", nil)
	if err != nil {
		t.Fatalf("dial: %v %v", resp, err)
	}
	t.Cleanup(func() { c.CloseNow() })
	return c
}

// fakeCreate sends a response.create and returns the events' types and the
// terminal (or error) event; err is what cut them short.
func fakeCreate(t *testing.T, c *websocket.Conn, body string) ([]string, map[string]any, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Write(ctx, websocket.MessageText, []byte(`{"type":"response.create",`+body[1:])); err != nil {
		t.Fatal(err)
	}
	var types []string
	for {
		_, data, err := c.Read(ctx)
		if err != nil {
			return types, nil, err
		}
		var ev map[string]any
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.UseNumber()
		if err := dec.Decode(&ev); err != nil {
			t.Fatalf("message %s: %v", data, err)
		}
		if _, ok := ev["sent_unix_nano"]; !ok && ev["type"] != "error" {
			t.Errorf("message without sent_unix_nano: %s", data)
		}
		typ, _ := ev["type"].(string)
		types = append(types, typ)
		switch typ {
		case "response.completed", "response.incomplete", "response.failed", "error":
			return types, ev, nil
		}
	}
}

// The fake's socket: responses one after another, each the events of a
// stream with the controls' usage; a previous_response_id of the socket's
// own store:false response accepted, an unknown one refused with the
// vendor's error event and the socket open; abort_after_events drops it.
func TestResponsesSocket(t *testing.T) {
	tf := newTestFake(t, nil)
	tf.setControl(`{"cache_read_tokens":5}`)
	c := dialFake(t, tf)
	types, last, err := fakeCreate(t, c, `{"model":"beta-large","input":"hi","store":false}`)
	if err != nil || types[0] != "response.created" || last["type"] != "response.completed" {
		t.Fatalf("first: %v %v %v", types, last, err)
	}
	if n := num(t, last, "response", "usage", "input_tokens_details", "cached_tokens"); n != 5 {
		t.Errorf("cached tokens %d, want 5", n)
	}
	id := str(t, last, "response", "id")
	_, last, err = fakeCreate(t, c, `{"model":"beta-large","input":"more","previous_response_id":"`+id+`"}`)
	if err != nil || last["type"] != "response.completed" {
		t.Fatalf("continuation of a socket-kept response: %v %v", last, err)
	}
	_, last, err = fakeCreate(t, c, `{"model":"beta-large","input":"more","previous_response_id":"resp_unknown"}`)
	if err != nil || last["type"] != "error" || num(t, last, "status") != 400 || str(t, last, "error", "code") != "previous_response_not_found" {
		t.Fatalf("unknown previous response: %v %v", last, err)
	}
	tf.setControl(`{"abort_after_events":2}`)
	types, _, err = fakeCreate(t, c, `{"model":"beta-large","input":"cut"}`)
	if err == nil || len(types) != 2 {
		t.Fatalf("abort_after_events: %v %v", types, err)
	}
	if got := len(tf.f.records.snapshot()); got == 0 {
		t.Errorf("no records")
	}
}

// no_websocket: the upgrade is unknown (404), as at an HTTP-only vendor.
func TestResponsesSocketOff(t *testing.T) {
	tf := newTestFake(t, nil)
	tf.setControl(`{"no_websocket":true}`)
	_, resp, err := websocket.Dial(context.Background(), "ws"+strings.TrimPrefix(tf.chatCompletions.URL, "http")+"/v1/responses", nil)
	if err == nil || resp == nil || resp.StatusCode != 404 {
		t.Fatalf("no_websocket: %v %v", resp, err)
	}
}
