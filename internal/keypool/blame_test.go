package keypool

import (
	"regexp"
	"testing"
	"time"

	"github.com/modelgateway/gateway/internal/testclock"
)

// Every row of the table, with the evidence that selects it and the
// evidence that does not.
func TestJudgeEveryRule(t *testing.T) {
	for _, c := range []struct {
		status  int
		headers map[string]string
		rule    string
		blame   string
		state   string
	}{
		{429, map[string]string{ErrorHeader: "request_too_large", "x-ratelimit-remaining-tokens": "0"}, "request_too_large", BlameRequest, ""},
		{429, map[string]string{ErrorHeader: "insufficient_quota"}, "insufficient_quota", BlameKey, Disabled},
		{429, map[string]string{"x-ratelimit-remaining-requests": "0"}, "limit_spent", BlameKey, Cooling},
		{429, map[string]string{"x-ratelimit-remaining-tokens": "0"}, "limit_spent", BlameKey, Cooling},
		{429, map[string]string{"anthropic-ratelimit-requests-remaining": "0"}, "limit_spent", BlameKey, Cooling},
		{429, map[string]string{"anthropic-ratelimit-tokens-remaining": " 0 "}, "limit_spent", BlameKey, Cooling},
		{429, map[string]string{"anthropic-ratelimit-input-tokens-remaining": "0"}, "limit_spent", BlameKey, Cooling},
		{429, map[string]string{"anthropic-ratelimit-output-tokens-remaining": "0"}, "limit_spent", BlameKey, Cooling},
		{429, map[string]string{ErrorHeader: "rate_limit_exceeded", "x-ratelimit-remaining-requests": "12"}, "rate_limit_exceeded", BlameKey, Cooling},
		{429, map[string]string{"anthropic-ratelimit-requests-remaining": "41", "retry-after": "300"}, "limited", BlameUnsure, Cooling},
		{429, map[string]string{"anthropic-ratelimit-requests-remaining": "many"}, "limited", BlameUnsure, Cooling},
		{429, nil, "limited", BlameUnsure, Cooling},
		{401, map[string]string{ErrorHeader: "invalid_api_key"}, "invalid_api_key", BlameKey, Disabled},
		{401, map[string]string{ErrorHeader: "invalid_x_api_key"}, "invalid_x_api_key", BlameKey, Disabled},
		{401, map[string]string{ErrorHeader: "rate_limit_exceeded"}, "unauthorized", BlameUnsure, Disabled},
		{401, nil, "unauthorized", BlameUnsure, Disabled},
		{402, nil, "payment_required", BlameKey, Disabled},
		{403, map[string]string{ErrorHeader: "invalid_api_key"}, "forbidden", BlameUnsure, Disabled},
		{529, nil, "overloaded", BlameKey, Cooling},
		{503, map[string]string{"retry-after": "3"}, "unavailable", BlameKey, Cooling},
	} {
		r, ok := Judge(c.status, func(h string) string { return c.headers[h] })
		if !ok || r.Name != c.rule || r.Blame != c.blame || r.State != c.state {
			t.Errorf("%d %v: rule %+v (%v); want %s, blame %s, state %q", c.status, c.headers, r, ok, c.rule, c.blame, c.state)
		}
	}
	for _, status := range []int{200, 400, 404, 500, 503} {
		if r, ok := Judge(status, func(string) string { return "" }); ok {
			t.Errorf("%d judged %+v; want no rule", status, r)
		}
	}
	// Every rule is reachable: the cases above name each.
	seen := map[string]bool{}
	for _, r := range Rules {
		if seen[r.Name] {
			t.Errorf("rule %s twice", r.Name)
		}
		seen[r.Name] = true
		if r.Error != "" && !hasMarker(r.Error) {
			t.Errorf("rule %s reads marker %q, which Markers lacks", r.Name, r.Error)
		}
		if r.Blame != BlameRequest && r.State != Cooling && r.State != Disabled {
			t.Errorf("rule %s blames %s without a state", r.Name, r.Blame)
		}
	}
}

func hasMarker(name string) bool {
	for _, m := range Markers {
		if m.Name == name {
			return true
		}
	}
	return false
}

// The markers match the vendors' bodies, first one first, and never a
// client's text echoed (escaped) inside a message.
func TestMarkersReadVendorBodies(t *testing.T) {
	first := func(body string) string {
		for _, m := range Markers {
			if regexp.MustCompile(m.Pattern()).MatchString(body) {
				return m.Name
			}
		}
		return ""
	}
	for body, want := range map[string]string{
		`{"error":{"message":"Request too large for gpt-4o in organization org-x on tokens per min (TPM): Limit 30000, Requested 90000.","type":"tokens","param":null,"code":"rate_limit_exceeded"}}`:      "request_too_large",
		`{"error":{"message":"You exceeded your current quota, please check your plan and billing details.","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}`:                        "insufficient_quota",
		`{"error":{"message":"Rate limit reached for gpt-4o in organization org-x on requests per min (RPM): Limit 3, Used 3, Requested 1.","type":"requests","param":null,"code":"rate_limit_exceeded"}}`: "rate_limit_exceeded",
		`{"error":{"message":"Incorrect API key provided: sk-...abcd.","type":"invalid_request_error","param":null,"code": "invalid_api_key"}}`:                                                            "invalid_api_key",
		`{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}`:                                                                                                           "invalid_x_api_key",
		`{"type":"error","error":{"type":"rate_limit_error","message":"Number of request tokens has exceeded your per-minute rate limit"}}`:                                                                "",
		`{"error":{"message":"The model \"code\":\"insufficient_quota\" does not exist","code":"model_not_found"}}`:                                                                                        "",
	} {
		if got := first(body); got != want {
			t.Errorf("%s: marker %q; want %q", body, got, want)
		}
	}
}

// An unsure refusal cools its key only once two accounts drew it within the
// window; one account's, however many, never does, and bars that account.
func TestUnsureRefusalsNeedTwoAccounts(t *testing.T) {
	clock := testclock.New(time.Unix(1e9, 0))
	p := New("alpha", three(), Options{CoolDown: 10 * time.Second, MaxCoolDown: time.Minute, ProbeInterval: 10 * time.Minute,
		Corroborate: 2, AccountRefusals: 5, Window: time.Minute, Now: clock.Now})
	limited, _ := Judge(429, func(string) string { return "" })
	for i := range 4 {
		if v := p.Attempt("k1", "attacker", limited, 300*time.Second, time.Time{}); v.State != Active || v.Changed || v.Barred {
			t.Fatalf("attacker's refusal %d: %+v; want k1 active, the attacker not yet barred", i, v)
		}
	}
	if _, barred := p.Barred("attacker"); barred {
		t.Fatal("barred after 4 refusals; want 5")
	}
	if v := p.Attempt("k2", "attacker", limited, 0, time.Time{}); !v.Barred || v.State != Active {
		t.Fatalf("fifth refusal: %+v; want the attacker barred, k2 active", v)
	}
	if until, barred := p.Barred("attacker"); !barred || !until.Equal(clock.Now().Add(time.Minute)) {
		t.Fatalf("attacker barred %v until %v; want a window", barred, until)
	}
	if _, barred := p.Barred("other"); barred {
		t.Fatal("another account barred")
	}
	// A second account on the same key and status within the window: the
	// key's.
	clock.Advance(30 * time.Second)
	if v := p.Attempt("k1", "other", limited, 5*time.Second, time.Time{}); v.State != Cooling || !v.Changed {
		t.Fatalf("a second account's 429 on k1: %+v; want k1 cooling", v)
	}
	// Out of the window the evidence is forgotten.
	clock.Advance(2 * time.Minute)
	if v := p.Attempt("k3", "a", limited, 0, time.Time{}); v.State != Active {
		t.Fatalf("%+v", v)
	}
	clock.Advance(2 * time.Minute)
	if v := p.Attempt("k3", "b", limited, 0, time.Time{}); v.State != Active {
		t.Fatalf("two accounts minutes apart cooled k3: %+v", v)
	}
	if _, barred := p.Barred("attacker"); barred {
		t.Fatal("still barred after the window")
	}
	// A request's fault never touches the key, however many accounts.
	tooLarge, _ := Judge(429, func(h string) string { return map[string]string{ErrorHeader: "request_too_large"}[h] })
	for _, a := range []string{"a", "b", "c"} {
		if v := p.Attempt("k2", a, tooLarge, 0, time.Time{}); v.State != Active {
			t.Fatalf("request too large cooled k2: %+v", v)
		}
	}
	// The key's fault cools or disables at once.
	quota, _ := Judge(429, func(h string) string { return map[string]string{ErrorHeader: "insufficient_quota"}[h] })
	if v := p.Attempt("k2", "a", quota, 0, time.Time{}); v.State != Disabled || !v.Changed {
		t.Fatalf("insufficient_quota: %+v; want k2 disabled", v)
	}
}
