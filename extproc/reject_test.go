package extproc

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/store"
)

// clientAnswer is what the processor told Envoy to send the client instead of
// forwarding the request.
type clientAnswer struct {
	status     int
	errType    string // error.type of the vendor's error body
	message    string
	retryAfter string
	// x-should-retry and x-gateway-limit-reset, when set
	shouldRetry, reset string
}

// firstRejection runs a request through the exchange until the processor
// answers the client itself, and returns that answer; ok is false when the
// request was forwarded.
func firstRejection(t *testing.T, r *rig, hdrs []string, body []byte) (a clientAnswer, ok bool) {
	t.Helper()
	ctx := context.Background()
	x := &exchange{s: r.srv}
	defer x.finish()
	msgs := []*extprocv3.ProcessingRequest{{Request: &extprocv3.ProcessingRequest_RequestHeaders{
		RequestHeaders: headers(hdrs...),
	}}}
	if body != nil {
		msgs = append(msgs, &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
			RequestBody: &extprocv3.HttpBody{Body: body, EndOfStream: true},
		}})
	}
	for _, m := range msgs {
		ir := x.step(ctx, m).GetImmediateResponse()
		if ir == nil {
			continue
		}
		a.status = int(ir.GetStatus().GetCode())
		for _, h := range ir.GetHeaders().GetSetHeaders() {
			switch h.GetHeader().GetKey() {
			case "retry-after":
				a.retryAfter = string(h.GetHeader().GetRawValue())
			case "x-should-retry":
				a.shouldRetry = string(h.GetHeader().GetRawValue())
			case "x-gateway-limit-reset":
				a.reset = string(h.GetHeader().GetRawValue())
			case "content-type":
				if ct := string(h.GetHeader().GetRawValue()); ct != "application/json" {
					t.Fatalf("content-type %q", ct)
				}
			}
		}
		var b struct {
			Type  string `json:"type"`
			Error struct {
				Type    string `json:"type"`
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.Unmarshal(ir.GetBody(), &b); err != nil {
			t.Fatalf("error body is not JSON: %q", ir.GetBody())
		}
		a.errType, a.message = b.Error.Type, b.Error.Message
		return a, true
	}
	return a, false
}

func messagesHeaders(key string, extra ...string) []string {
	h := []string{":method", "POST", ":path", "/alpha/v1/messages", "content-type", "application/json"}
	if key != "" {
		h = append(h, "x-api-key", key)
	}
	return append(h, extra...)
}

// Every branch on which the processor refuses a request answers in the
// messages format with the status the vendor would use, and nothing is held.
func TestRejectionBranches(t *testing.T) {
	body := []byte(`{"model":"claude-sonnet-4-5","max_tokens":256,"messages":[{"role":"user","content":"Hi"}]}`)
	cases := []struct {
		name    string
		account rigAccount
		setup   func(t *testing.T, r *rig)
		headers func(r *rig) []string
		body    []byte
		status  int
		errType string
		message string // a part of the message
		retry   bool
		// final: waiting will not cure it; no retry-after, x-should-retry:
		// false and the limit's reset time.
		final  bool
		resets bool
	}{
		{name: "no credential", headers: func(r *rig) []string { return messagesHeaders("") },
			status: 401, errType: "authentication_error", message: "no API key"},
		{name: "malformed authorization", headers: func(r *rig) []string {
			return messagesHeaders("", "authorization", "Basic Zm9vOmJhcg==")
		}, status: 401, errType: "authentication_error", message: "malformed"},
		{name: "two different keys", headers: func(r *rig) []string {
			return messagesHeaders(r.key, "authorization", "Bearer cr_somethingelse123")
		}, status: 401, errType: "authentication_error", message: "different keys"},
		{name: "unknown key", headers: func(r *rig) []string { return messagesHeaders("cr_" + strings.Repeat("x", 40)) },
			status: 401, errType: "authentication_error", message: "invalid API key"},
		{name: "not a key of ours", headers: func(r *rig) []string { return messagesHeaders("sk-" + strings.Repeat("x", 40)) },
			status: 401, errType: "authentication_error", message: "invalid API key"},
		{name: "read-only token", setup: func(t *testing.T, r *rig) {
			tok, _, err := r.st.CreateKey(context.Background(), r.acct, account.ReadOnlyToken, account.KeyOptions{})
			if err != nil {
				t.Fatal(err)
			}
			r.key = tok
		}, headers: func(r *rig) []string { return messagesHeaders(r.key) },
			status: 403, errType: "permission_error", message: "read-only"},
		{name: "expired key", account: rigAccount{key: account.KeyOptions{ExpiresAt: time.Now().Add(-time.Minute)}},
			headers: func(r *rig) []string { return messagesHeaders(r.key) },
			status:  401, errType: "authentication_error", message: "expired"},
		{name: "revoked key", setup: func(t *testing.T, r *rig) {
			keys, err := r.st.ListKeys(context.Background(), r.acct)
			if err != nil || len(keys) != 1 {
				t.Fatalf("keys %v, %v", keys, err)
			}
			if err := r.st.RevokeKey(context.Background(), r.acct, keys[0].ID); err != nil {
				t.Fatal(err)
			}
		}, headers: func(r *rig) []string { return messagesHeaders(r.key) },
			status: 401, errType: "authentication_error"},
		{name: "unknown path", headers: func(r *rig) []string {
			return []string{":method", "POST", ":path", "/alpha/v1/complete", "x-api-key", r.key}
		}, status: 404, errType: "not_found_error", message: "no such path"},
		{name: "under no upstream", headers: func(r *rig) []string {
			return []string{":method", "POST", ":path", "/anthropic/v1/messages", "x-api-key", r.key}
		}, status: 404, errType: "not_found", message: `"/anthropic/v1/messages" is under no upstream of this gateway; each upstream is reached under /NAME/ (/alpha/)`},
		{name: "metered path with GET", headers: func(r *rig) []string {
			return []string{":method", "GET", ":path", "/alpha/v1/messages", "x-api-key", r.key}
		}, status: 404, errType: "not_found_error"},
		{name: "declared body too large", headers: func(r *rig) []string {
			return messagesHeaders(r.key, "content-length", strconv.Itoa(33<<20))
		}, status: 413, errType: "request_too_large"},
		{name: "NUL in the model name", headers: func(r *rig) []string { return messagesHeaders(r.key) },
			body: []byte(`{"model":"claude-sonnet-4-5\u0000x","max_tokens":10,"messages":[]}`), status: 400,
			errType: "invalid_request_error", message: "control characters"},
		{name: "control character in the model name", headers: func(r *rig) []string { return messagesHeaders(r.key) },
			body: []byte(`{"model":"a\u001bb","max_tokens":10,"messages":[]}`), status: 400,
			errType: "invalid_request_error", message: "control characters"},
		{name: "malformed JSON", headers: func(r *rig) []string { return messagesHeaders(r.key) },
			body: []byte(`{"model":"claude-sonnet-4-5",`), status: 400, errType: "invalid_request_error"},
		{name: "unknown model", headers: func(r *rig) []string { return messagesHeaders(r.key) },
			body:   []byte(`{"model":"claude-nonexistent-9","max_tokens":10,"messages":[]}`),
			status: 400, errType: "invalid_request_error", message: "claude-nonexistent-9"},
		{name: "max_tokens above the model's output", headers: func(r *rig) []string { return messagesHeaders(r.key) },
			body:   []byte(`{"model":"claude-sonnet-4-5","max_tokens":100000000,"messages":[]}`),
			status: 400, errType: "invalid_request_error", message: "max_tokens"},
		{name: "model outside the key's allow-list", account: rigAccount{key: account.KeyOptions{Models: []string{"claude-haiku-4-5"}}},
			headers: func(r *rig) []string { return messagesHeaders(r.key) },
			status:  403, errType: "permission_error", message: "claude-sonnet-4-5"},
		{name: "balance too low for the hold", account: rigAccount{balance: 1},
			headers: func(r *rig) []string { return messagesHeaders(r.key) },
			status:  402, errType: "billing_error", message: "insufficient balance", final: true},
		{name: "request rate", account: rigAccount{limits: account.Limits{RPM: 1, WindowMinutes: 1}},
			setup: func(t *testing.T, r *rig) {
				if a, ok := firstRejection(t, r, messagesHeaders(r.key), body); ok {
					t.Fatalf("first request refused: %+v", a)
				}
			},
			headers: func(r *rig) []string { return messagesHeaders(r.key) },
			status:  429, errType: "rate_limit_error", message: "rate limit", retry: true},
		{name: "daily spend", account: rigAccount{limits: account.Limits{DailyNanoUSD: 1}},
			headers: func(r *rig) []string { return messagesHeaders(r.key) },
			status:  429, errType: "rate_limit_error", message: "daily spend limit", final: true, resets: true},
		{name: "key's request rate", account: rigAccount{key: account.KeyOptions{Limits: account.Limits{RPM: 1, WindowMinutes: 1}}},
			setup: func(t *testing.T, r *rig) {
				if a, ok := firstRejection(t, r, messagesHeaders(r.key), body); ok {
					t.Fatalf("first request refused: %+v", a)
				}
			},
			headers: func(r *rig) []string { return messagesHeaders(r.key) },
			status:  429, errType: "rate_limit_error", message: "request rate limit reached for this key", retry: true},
		// A window that frees a slot only in minutes: no client should
		// sleep that long, so the refusal is final with its reset time.
		{name: "request rate, a long window", account: rigAccount{limits: account.Limits{RPM: 1, WindowMinutes: 10}},
			setup: func(t *testing.T, r *rig) {
				for i := range 10 { // the window's 1 × 10
					if a, ok := firstRejection(t, r, messagesHeaders(r.key), body); ok {
						t.Fatalf("request %d refused: %+v", i, a)
					}
				}
			},
			headers: func(r *rig) []string { return messagesHeaders(r.key) },
			status:  429, errType: "rate_limit_error", message: "request rate limit reached", final: true, resets: true},
		{name: "key's concurrency", account: rigAccount{key: account.KeyOptions{Limits: account.Limits{Concurrency: 1}}},
			setup: func(t *testing.T, r *rig) {
				// A request still in flight: admitted, not ended.
				_, err := r.st.Admit(context.Background(), &account.Admission{RequestID: "inflight", AccountID: r.acct,
					KeyID: r.keyID(t), Hold: 1, KeyLimits: account.Limits{Concurrency: 1}})
				if err != nil {
					t.Fatal(err)
				}
			},
			headers: func(r *rig) []string { return messagesHeaders(r.key) },
			status:  429, errType: "rate_limit_error", message: "concurrent request limit reached for this key", retry: true},
		{name: "account's tokens per minute, bound above the limit", account: rigAccount{limits: account.Limits{TPM: 100}},
			headers: func(r *rig) []string { return messagesHeaders(r.key) },
			status:  429, errType: "rate_limit_error", message: "more than the tokens-per-minute limit for this account", final: true},
		{name: "key's tokens per minute", account: rigAccount{key: account.KeyOptions{Limits: account.Limits{TPM: 500}}},
			setup: func(t *testing.T, r *rig) {
				// A request in flight counts at its token bound.
				_, err := r.st.Admit(context.Background(), &account.Admission{RequestID: "inflight", AccountID: r.acct,
					KeyID: r.keyID(t), Hold: 1, Tokens: 400, KeyLimits: account.Limits{TPM: 500}})
				if err != nil {
					t.Fatal(err)
				}
			},
			headers: func(r *rig) []string { return messagesHeaders(r.key) },
			status:  429, errType: "rate_limit_error", message: "tokens-per-minute limit for this key: 0 of 500 tokens used in the last 60 s, 400 held by requests in flight", retry: true},
		{name: "key's daily spend", account: rigAccount{key: account.KeyOptions{Limits: account.Limits{DailyNanoUSD: 1}}},
			headers: func(r *rig) []string { return messagesHeaders(r.key) },
			status:  429, errType: "rate_limit_error", message: "daily spend limit for this key: $0.00 of $0.000000001 used", final: true, resets: true},
		{name: "account's monthly spend", account: rigAccount{limits: account.Limits{MonthlyNanoUSD: 1}},
			headers: func(r *rig) []string { return messagesHeaders(r.key) },
			status:  429, errType: "rate_limit_error", message: "monthly spend limit for this account: $0.00 of $0.000000001 used", final: true, resets: true},
		{name: "key's lifetime spend", account: rigAccount{key: account.KeyOptions{Limits: account.Limits{TotalNanoUSD: 1}}},
			headers: func(r *rig) []string { return messagesHeaders(r.key) },
			status:  402, errType: "billing_error", message: "lifetime spend limit for this key: $0.00 of $0.000000001 used", final: true},
		{name: "store unavailable", setup: func(t *testing.T, r *rig) {
			// The key cache is off (TTL 0), so the key lookup meets the outage.
			r.mr.Close()
		}, headers: func(r *rig) []string { return messagesHeaders(r.key) },
			status: 503, errType: "overloaded_error", retry: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := newRigWith(t, "alpha", c.account)
			if c.setup != nil {
				c.setup(t, r)
			}
			b := c.body
			if b == nil {
				b = body
			}
			a, ok := firstRejection(t, r, c.headers(r), b)
			if !ok {
				t.Fatal("forwarded; want a rejection")
			}
			if a.status != c.status || a.errType != c.errType || !strings.Contains(a.message, c.message) {
				t.Fatalf("got %d %s %q; want %d %s containing %q", a.status, a.errType, a.message, c.status, c.errType, c.message)
			}
			if c.retry != (a.retryAfter != "") {
				t.Fatalf("retry-after %q; want one: %v", a.retryAfter, c.retry)
			}
			if c.final != (a.shouldRetry == "false") || c.resets != (a.reset != "") {
				t.Fatalf("x-should-retry %q, x-gateway-limit-reset %q; want false: %v, a reset time: %v", a.shouldRetry, a.reset, c.final, c.resets)
			}
			if c.status == 503 {
				return
			}
			// The setup's own request in flight, if any, ends.
			r.st.Settle(context.Background(), account.Settlement{RequestID: "inflight", AccountID: r.acct, KeyID: r.keyID(t), Status: 499})
			r.srv.Flush(context.Background()) // the first request of the rate case settles
			if n, held, err := r.st.OpenHolds(context.Background(), r.acct); err != nil || n != 0 || held != 0 {
				t.Fatalf("open holds after a rejection: %d (%d nano-USD), %v", n, held, err)
			}
		})
	}
}

// The chat-completions route answers the same refusals in its own format:
// {"error":{"message","type","param","code"}}.
func TestRejectionsInChatCompletionsFormat(t *testing.T) {
	r := newRigWith(t, "beta", rigAccount{balance: 1})
	ctx := context.Background()
	x := &exchange{s: r.srv}
	x.step(ctx, &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{
		RequestHeaders: headers(":method", "POST", ":path", "/beta/v1/chat/completions", "authorization", "Bearer "+r.key),
	}})
	ir := x.step(ctx, &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
		RequestBody: &extprocv3.HttpBody{Body: []byte(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Hi"}]}`), EndOfStream: true},
	}}).GetImmediateResponse()
	var b struct {
		Error struct {
			Message string  `json:"message"`
			Type    string  `json:"type"`
			Param   *string `json:"param"`
			Code    string  `json:"code"`
		} `json:"error"`
	}
	if ir == nil || json.Unmarshal(ir.GetBody(), &b) != nil {
		t.Fatalf("want a rejection with a JSON body, got %v", ir)
	}
	if ir.GetStatus().GetCode() != 402 || b.Error.Code != "insufficient_quota" || b.Error.Message == "" {
		t.Fatalf("%d %+v", ir.GetStatus().GetCode(), b.Error)
	}
}

// A request error names the offending field in chat-completions' param, as
// the vendor does.
func TestChatCompletionsErrorNamesParam(t *testing.T) {
	r := newRigWith(t, "beta", rigAccount{})
	ctx := context.Background()
	x := &exchange{s: r.srv}
	x.step(ctx, &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{
		RequestHeaders: headers(":method", "POST", ":path", "/beta/v1/chat/completions", "authorization", "Bearer "+r.key),
	}})
	ir := x.step(ctx, &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
		RequestBody: &extprocv3.HttpBody{Body: []byte(`{"messages":[{"role":"user","content":"Hi"}]}`), EndOfStream: true},
	}}).GetImmediateResponse()
	var b struct {
		Error struct {
			Param *string `json:"param"`
		} `json:"error"`
	}
	if ir == nil || json.Unmarshal(ir.GetBody(), &b) != nil || ir.GetStatus().GetCode() != 400 {
		t.Fatalf("want a 400 with a JSON body, got %v", ir)
	}
	if b.Error.Param == nil || *b.Error.Param != "model" {
		t.Fatalf("param %v in %s; want \"model\"", b.Error.Param, ir.GetBody())
	}
}

// keyID is the id of the rig's model key.
func (r *rig) keyID(t *testing.T) string {
	t.Helper()
	k, err := r.st.LookupKey(context.Background(), store.HashSecret(r.key))
	if err != nil {
		t.Fatal(err)
	}
	return k.ID
}
