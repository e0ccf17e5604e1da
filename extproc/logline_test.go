package extproc

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/usage"
)

// The request's log line carries the request's fields, the usage as an
// object of the kinds not zero, and writing it allocates nothing but the
// box of cost_usd (the JSON handler writes a float through encoding/json).
func TestRequestLogLine(t *testing.T) {
	r := newRig(t)
	var buf bytes.Buffer
	r.srv.settler.lines = slog.New(slog.NewJSONHandler(&buf, nil))
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	st := account.Settlement{RequestID: "req_1", AccountID: "acct_1", KeyID: "key_1", Endpoint: "primary", Priced: "claude-sonnet-4-5",
		Status: 200, Usage: usage.Usage{Input: 12, Output: 11}, Cost: 1_500_000, ServiceTier: "standard",
		StartedAt: t0, EndedAt: t0.Add(1234 * time.Millisecond)}
	r.srv.recordSettled("alpha", "claude-sonnet-4-5", st, true)
	var line map[string]any
	if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
		t.Fatalf("%v: %s", err, buf.Bytes())
	}
	want := map[string]any{"msg": "request", "request_id": "req_1", "account": "acct_1", "key": "key_1", "upstream": "alpha",
		"endpoint": "primary", "model": "claude-sonnet-4-5", "status": 200.0, "stream": false,
		"usage": map[string]any{"input": 12.0, "output": 11.0}, "service_tier": "standard", "cost_usd": 0.0015,
		"estimated": false, "interrupted": false, "duration_ms": 1234.0, "background": true}
	for k, v := range want {
		if got, err := json.Marshal(line[k]); err != nil || !bytes.Equal(got, must(json.Marshal(v))) {
			t.Errorf("%s: %s, want %v", k, got, v)
		}
	}
	if raceEnabled {
		return // the race detector's sync.Pool drops pooled values at random: allocations are not the product's
	}
	r.srv.settler.lines = slog.New(slog.NewJSONHandler(io.Discard, nil))
	r.srv.recordSettled("alpha", "claude-sonnet-4-5", st, false) // the metrics' series made
	if n := testing.AllocsPerRun(100, func() { r.srv.recordSettled("alpha", "claude-sonnet-4-5", st, false) }); n > 1 {
		t.Errorf("the request's log line and metrics: %.1f allocations, want at most one", n)
	}
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}
