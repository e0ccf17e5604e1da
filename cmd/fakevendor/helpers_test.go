package main

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// testFake is a fake served by httptest servers.
type testFake struct {
	t                                  *testing.T
	f                                  *fake
	messages, chatCompletions, control *httptest.Server
}

func newTestFake(t *testing.T, mod func(*config)) *testFake {
	t.Helper()
	cfg := config{
		name:                  "primary",
		messagesModels:        []string{"alpha-large", "alpha-small"},
		chatCompletionsModels: []string{"beta-large"},
		maxRecords:            1000,
	}
	if mod != nil {
		mod(&cfg)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	f := newFake(cfg, log)
	tf := &testFake{
		t:               t,
		f:               f,
		messages:        httptest.NewServer(f.messages),
		chatCompletions: httptest.NewServer(f.chatCompletions),
		control:         httptest.NewServer(f.control),
	}
	t.Cleanup(func() {
		tf.messages.Close()
		tf.chatCompletions.Close()
		tf.control.Close()
	})
	return tf
}

// do sends a request and returns the response with its whole body. A body
// cut short (an aborted stream) is returned with the read error.
func (tf *testFake) do(method, url string, body string, header ...string) (*http.Response, []byte, error) {
	tf.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		tf.t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tf.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	return resp, data, err
}

// call is do for requests that must complete.
func (tf *testFake) call(method, url string, body string, header ...string) (*http.Response, []byte) {
	tf.t.Helper()
	resp, data, err := tf.do(method, url, body, header...)
	if err != nil {
		tf.t.Fatalf("%s %s: reading body: %v", method, url, err)
	}
	return resp, data
}

// setControl posts a control update, which must succeed.
func (tf *testFake) setControl(body string) {
	tf.t.Helper()
	resp, data := tf.call("POST", tf.control.URL+"/control", body)
	if resp.StatusCode != 200 {
		tf.t.Fatalf("POST /control %s: %d %s", body, resp.StatusCode, data)
	}
}

func (tf *testFake) records() []Record {
	tf.t.Helper()
	_, data := tf.call("GET", tf.control.URL+"/requests", "")
	var recs []Record
	mustUnmarshal(tf.t, data, &recs)
	return recs
}

func mustUnmarshal(t *testing.T, data []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatalf("unmarshal %s: %v", data, err)
	}
}

// sseEvent is one parsed server-sent event.
type sseEvent struct {
	sentNano int64 // from the ": sent_unix_nano=" comment
	event    string
	data     string
}

// parseSSE splits a stream into events and checks the framing the fake
// promises: each event is preceded by exactly one timestamp comment and
// holds one data line.
func parseSSE(t *testing.T, body []byte) []sseEvent {
	t.Helper()
	var out []sseEvent
	text := string(body)
	for text != "" {
		block, rest, ok := strings.Cut(text, "\n\n")
		if !ok {
			t.Fatalf("unterminated event %q", text)
		}
		text = rest
		var ev sseEvent
		for i, line := range strings.Split(block, "\n") {
			field, value, _ := strings.Cut(line, ":")
			value = strings.TrimPrefix(value, " ")
			switch {
			case i == 0:
				if field != "" || !strings.HasPrefix(value, "sent_unix_nano=") {
					t.Fatalf("event does not start with the timestamp comment: %q", block)
				}
				n, err := strconv.ParseInt(strings.TrimPrefix(value, "sent_unix_nano="), 10, 64)
				if err != nil || n <= 0 {
					t.Fatalf("bad timestamp in %q", line)
				}
				ev.sentNano = n
			case field == "event":
				ev.event = value
			case field == "data":
				if ev.data != "" {
					t.Fatalf("two data lines in %q", block)
				}
				ev.data = value
			default:
				t.Fatalf("unexpected line %q in %q", line, block)
			}
		}
		out = append(out, ev)
	}
	return out
}

// jsonObject decodes an object keeping numbers exact.
func jsonObject(t *testing.T, data string) map[string]any {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(data))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		t.Fatalf("decode %s: %v", data, err)
	}
	return m
}

// keys returns the keys of m, sorted and joined, for comparing structures.
func keys(t *testing.T, v any) string {
	t.Helper()
	m, ok := v.(map[string]any)
	if !ok {
		t.Fatalf("not an object: %v", v)
	}
	return strings.Join(slices.Sorted(maps.Keys(m)), ",")
}

// path walks nested maps and arrays: path(m, "usage", "output_tokens"),
// path(m, "choices", 0, "delta").
func path(t *testing.T, v any, steps ...any) any {
	t.Helper()
	for _, s := range steps {
		switch s := s.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				t.Fatalf("not an object at %q: %v", s, v)
			}
			if v, ok = m[s]; !ok {
				t.Fatalf("no key %q in %v", s, m)
			}
		case int:
			a, ok := v.([]any)
			if !ok || s >= len(a) {
				t.Fatalf("no index %d in %v", s, v)
			}
			v = a[s]
		}
	}
	return v
}

// num returns a json.Number field as an int.
func num(t *testing.T, v any, steps ...any) int {
	t.Helper()
	n, ok := path(t, v, steps...).(json.Number)
	if !ok {
		t.Fatalf("%v at %v is not a number", path(t, v, steps...), steps)
	}
	i, err := n.Int64()
	if err != nil {
		t.Fatal(err)
	}
	return int(i)
}

func str(t *testing.T, v any, steps ...any) string {
	t.Helper()
	s, ok := path(t, v, steps...).(string)
	if !ok {
		t.Fatalf("%v at %v is not a string", path(t, v, steps...), steps)
	}
	return s
}

func ceil8(n int) int { return (n + 7) / 8 }

// compactJSON is used to compare JSON texts regardless of spacing.
func compactJSON(t *testing.T, s string) string {
	t.Helper()
	var b bytes.Buffer
	if err := json.Compact(&b, []byte(s)); err != nil {
		t.Fatalf("compact %s: %v", s, err)
	}
	return b.String()
}
