package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/modelgateway/gateway/internal/eventually"
	"github.com/modelgateway/gateway/test/launch"
	"github.com/modelgateway/gateway/test/launch/launchtest"
)

func compileSchema(t *testing.T, path string) *jsonschema.Schema {
	t.Helper()
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	s, err := c.Compile(path)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func validate(t *testing.T, s *jsonschema.Schema, body []byte) {
	t.Helper()
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("not JSON: %v: %s", err, body)
	}
	if err := s.Validate(v); err != nil {
		t.Fatalf("response does not match the spec's schema: %v\n%s", err, body)
	}
}

// Both records match a JSON Schema written from the API reference in docs/clients.md, for every period and
// every credential form.
func TestUsageAndHealthMatchSpecSchema(t *testing.T) {
	s := sharedStack(t, "usage")
	usageSchema := compileSchema(t, "testdata/usage.schema.json")
	healthSchema := compileSchema(t, "testdata/health.schema.json")
	acct := s.NewAccount(10, noLimits)
	s.Do("POST", alphaPath, messagesHeaders(acct.Key), messagesBody(false, ""))
	s.Do("POST", betaPath, chatCompletionsHeaders(acct.Key), chatCompletionsBody(false, false, ""))

	for _, period := range []string{"day", "month", "total", ""} {
		for _, h := range []map[string]string{
			{"Authorization": "Bearer " + acct.ReadOnly},
			{"x-api-key": acct.ReadOnly},
			{"Authorization": "Bearer " + acct.Key},
		} {
			path := "/v1/usage"
			if period != "" {
				path += "?period=" + period
			}
			resp, b := s.Do("GET", path, h, nil)
			if resp.StatusCode != 200 {
				t.Fatalf("%s: %d %s", path, resp.StatusCode, b)
			}
			validate(t, usageSchema, b)
			var u struct {
				Period  string `json:"period"`
				ByModel []struct {
					Model string `json:"model"`
				} `json:"by_model"`
			}
			mustJSON(t, b, &u)
			want := period
			if want == "" {
				want = "day"
			}
			if u.Period != want || len(u.ByModel) != 2 {
				t.Fatalf("%s: period %q (want %q), by_model %+v (want both models)", path, u.Period, want, u.ByModel)
			}
			// The additions: a cr_ key sees its own key, a ro_ token each
			// model key's share.
			var add struct {
				Key   *struct{ ID string }  `json:"key"`
				ByKey []struct{ ID string } `json:"by_key"`
			}
			mustJSON(t, b, &add)
			if ro := strings.Contains(fmt.Sprint(h), acct.ReadOnly); ro && (add.Key != nil || len(add.ByKey) != 1) || !ro && (add.Key == nil || add.ByKey != nil) {
				t.Fatalf("%s with %v: key %+v, by_key %+v", path, h, add.Key, add.ByKey)
			}
		}
	}
	resp, b := s.Do("GET", "/health", nil, nil)
	if resp.StatusCode != 200 {
		t.Fatalf("health %d", resp.StatusCode)
	}
	validate(t, healthSchema, b)
}

func TestUsageErrors(t *testing.T) {
	s := sharedStack(t, "usage")
	acct := s.NewAccount(10, noLimits)
	for _, c := range []struct {
		method, path string
		header       map[string]string
		status       int
		errType      string
	}{
		{"GET", "/v1/usage", nil, 401, "authentication_error"},
		{"GET", "/v1/usage", map[string]string{"Authorization": "Bearer ro_notarealtokennotarealtoken"}, 401, "authentication_error"},
		{"GET", "/v1/usage?period=week", map[string]string{"Authorization": "Bearer " + acct.ReadOnly}, 400, "invalid_request_error"},
		{"POST", "/v1/usage", map[string]string{"Authorization": "Bearer " + acct.ReadOnly}, 405, "method_not_allowed"},
		{"DELETE", "/v1/usage", map[string]string{"Authorization": "Bearer " + acct.ReadOnly}, 405, "method_not_allowed"},
	} {
		resp, b := s.Do(c.method, c.path, c.header, nil)
		var e struct {
			Error struct {
				Type    string `json:"type"`
				Message string `json:"message"`
			} `json:"error"`
		}
		if resp.StatusCode != c.status || json.Unmarshal(b, &e) != nil || e.Error.Type != c.errType || e.Error.Message == "" {
			t.Errorf("%s %s: %d %s; want %d with type %s", c.method, c.path, resp.StatusCode, b, c.status, c.errType)
		}
	}
}

// Usage deltas, read immediately after each reply ends, match the vendor's
// reported usage exactly; two accounts never see each other's usage.
func TestUsageIsRealTimeAndPerAccount(t *testing.T) {
	s := sharedStack(t, "usage")
	a := s.NewAccount(10, noLimits)
	b := s.NewAccount(10, noLimits)
	ap, bp := priceOf(t, s, "alpha", alphaModel), priceOf(t, s, "beta", betaModel)

	type step struct {
		do   func() tokens
		cost func(tokens) int64
	}
	steps := []step{
		{func() tokens {
			_, body := s.Do("POST", alphaPath, messagesHeaders(a.Key), messagesBody(false, ""))
			return messagesUsage(t, body, nil)
		}, func(u tokens) int64 { return cost(ap, u) }},
		{func() tokens {
			_, evs := stream(t, s, alphaPath, messagesHeaders(a.Key), messagesBody(true, ""))
			return messagesUsage(t, nil, evs)
		}, func(u tokens) int64 { return cost(ap, u) }},
		{func() tokens {
			_, body := s.Do("POST", betaPath, chatCompletionsHeaders(a.Key), chatCompletionsBody(false, false, ""))
			return chatCompletionsUsage(t, body, nil)
		}, func(u tokens) int64 { return cost(bp, u) }},
		{func() tokens {
			_, evs := stream(t, s, betaPath, chatCompletionsHeaders(a.Key), chatCompletionsBody(true, true, ""))
			return chatCompletionsUsage(t, nil, evs)
		}, func(u tokens) int64 { return cost(bp, u) }},
	}
	for i, st := range steps {
		before := s.Usage(a.ReadOnly, "day")
		u := st.do()
		after := s.Usage(a.ReadOnly, "day")
		delta := func(path string) float64 { return num(t, after, path) - num(t, before, path) }
		if delta("usage.input_tokens") != float64(u.Input) || delta("usage.output_tokens") != float64(u.Output) ||
			delta("usage.cache_tokens") != float64(u.CacheWrite+u.CacheRead) || delta("usage.requests") != 1 {
			t.Fatalf("step %d: usage moved %v/%v/%v, vendor reported %+v", i, delta("usage.input_tokens"), delta("usage.output_tokens"), delta("usage.cache_tokens"), u)
		}
		wantCost := float64(st.cost(u)) / 1e9
		if d := delta("usage.cost_usd"); d < wantCost-1e-12 || d > wantCost+1e-12 {
			t.Fatalf("step %d: cost moved %v, want %v", i, d, wantCost)
		}
		if d := delta("balance_usd"); d > -wantCost+1e-12 || d < -wantCost-1e-12 {
			t.Fatalf("step %d: balance moved %v, want %v", i, d, -wantCost)
		}
	}
	if got := s.Usage(b.ReadOnly, "total"); num(t, got, "usage.requests") != 0 || num(t, got, "balance_usd") != 10 {
		t.Fatalf("account b sees usage it did not make: %v", got)
	}
	// A cr_ key reads its own account, not another's.
	if got := s.Usage(b.Key, "total"); num(t, got, "usage.requests") != 0 {
		t.Fatalf("account b's key sees a's usage: %v", got)
	}
}

// /health reports non-ok with 503 while Redis is stopped, ok after it returns.
func TestHealthFollowsTheStore(t *testing.T) {
	s := launchtest.Start(t, launch.Options{})
	waitHealth := func(status int) {
		t.Helper()
		eventually.That(t, 20*time.Second, fmt.Sprintf("/health answers %d", status), func() (bool, string) {
			resp, b := s.Do("GET", "/health", nil, nil)
			if resp.StatusCode != status {
				return false, fmt.Sprintf("%d %s", resp.StatusCode, b)
			}
			var h struct{ Status string }
			mustJSON(t, b, &h)
			if (status == 200) != (h.Status == "ok") {
				t.Fatalf("HTTP %d with status %q", status, h.Status)
			}
			return true, ""
		})
	}
	waitHealth(200)
	s.Redis.Stop()
	waitHealth(503)
	s.Redis.Start()
	waitHealth(200)
}

// A usage read that follows a finished reply includes it: the sidecar
// settles a reply just after releasing its last chunk, and its /v1/usage
// waits for the account's queued settlements. Redis holds writes back while
// the reply ends, so the settlement is still queued when the read arrives.
func TestUsageReadAfterReplyIncludesIt(t *testing.T) {
	s := launchtest.Start(t, launch.Options{})
	acct := s.NewAccount(10, noLimits)
	s.Primary.Control(map[string]any{"event_delay_ms": 20, "reply_words": 3})
	ctx := t.Context()
	for i := 1; i <= 3; i++ {
		resp := open(t, ctx, s, alphaPath, messagesHeaders(acct.Key), messagesBody(true, ""))
		if resp.StatusCode != 200 {
			t.Fatalf("request %d: %d", i, resp.StatusCode)
		}
		br := bufio.NewReader(resp.Body)
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				t.Fatal(err)
			}
			if strings.HasPrefix(line, "data:") {
				break // admitted; the reply is under way
			}
		}
		// Writes (the settlement script) wait; reads (the usage) do not.
		if err := s.RDB.Do(ctx, "CLIENT", "PAUSE", "700", "WRITE").Err(); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadAll(br); err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		u := s.Usage(acct.ReadOnly, "day")
		if got := u["usage"].(map[string]any)["requests"].(float64); int(got) != i {
			t.Fatalf("usage read right after reply %d counts %v requests", i, got)
		}
	}
}
