package extproc

import (
	"testing"
	"time"

	"github.com/modelgateway/gateway/extproc/format"
	"github.com/modelgateway/gateway/internal/account"
)

// Every refusal names its limit, what is used and held of it and what
// this request would take, so that a client can tell a full limit from a
// request too large for what is left.
func TestRefusalMessagesNameTheAmounts(t *testing.T) {
	const usd = 1_000_000_000
	for _, tc := range []struct {
		name         string
		d            account.Decision
		hold, tokens int64
		kind         format.ErrorKind
		want         string
	}{
		{"rate", account.Decision{Outcome: account.RateLimited, Level: account.KeyLevel, RetryAfter: 5 * time.Second, Limit: 120, Used: 120, Request: 1}, 1, 1,
			format.RateLimited, "request rate limit reached for this key: 120 of 120 requests in its window; retry after 5s"},
		{"concurrency", account.Decision{Outcome: account.ConcurrencyLimited, Level: account.AccountLevel, RetryAfter: time.Second, Limit: 3, Used: 3, Request: 1}, 1, 1,
			format.RateLimited, "concurrent request limit reached for this account: 3 of 3 requests in flight; retry after 1s or when one ends"},
		{"tokens per minute", account.Decision{Outcome: account.TokenLimited, Level: account.KeyLevel, RetryAfter: 12 * time.Second, Limit: 300, Used: 72, Held: 150, Request: 100}, 1, 100,
			format.RateLimited, "tokens-per-minute limit for this key: 72 of 300 tokens used in the last 60 s, 150 held by requests in flight; " +
				"this request may use up to 100 tokens (input + max_tokens); retry after 12s"},
		{"tokens per minute, bound above the limit", account.Decision{Outcome: account.TokenLimited, Level: account.AccountLevel, Limit: 300, Request: 515}, 1, 515,
			format.RateLimited, "this request may use up to 515 tokens (input + max_tokens), more than the tokens-per-minute limit for this account allows at all (300); lower max_tokens or send less"},
		{"daily", account.Decision{Outcome: account.DailyLimited, Level: account.KeyLevel, Limit: 10 * usd, Used: 8 * usd, Held: 3 * usd / 2, Request: 3 * usd / 4}, 3 * usd / 4, 1,
			format.DailyLimit, "daily spend limit for this key: $8.00 of $10.00 used, $1.50 held by requests in flight; this request could cost up to $0.75; it resets at 00:00 UTC"},
		{"monthly", account.Decision{Outcome: account.MonthlyLimited, Level: account.AccountLevel, Limit: 100 * usd, Used: 79_600_000_000, Held: 123, Request: 20_400_000_124}, 20_400_000_124, 1,
			format.DailyLimit, "monthly spend limit for this account: $79.60 of $100.00 used, $0.000000123 held by requests in flight; this request could cost up to $20.400000124; it resets on the 1st of the month at 00:00 UTC"},
		{"lifetime", account.Decision{Outcome: account.TotalLimited, Level: account.KeyLevel, Limit: 5 * usd, Used: 4 * usd, Request: 2 * usd}, 2 * usd, 1,
			format.BillingExhausted, "lifetime spend limit for this key: $4.00 of $5.00 used, $0.00 held by requests in flight; this request could cost up to $2.00; the account's owner can raise it"},
		{"balance", account.Decision{Outcome: account.InsufficientBalance, Level: account.AccountLevel, Limit: 4_200_000_000, Held: 1_500_000_000, Request: 3 * usd}, 3 * usd, 1,
			format.BillingExhausted, "insufficient balance: the balance is $4.20, $1.50 of it held by requests in flight; this request could cost up to $3.00; top up the account"},
		{"negative balance", account.Decision{Outcome: account.InsufficientBalance, Level: account.AccountLevel, Limit: -2_500_000_000, Request: 1}, 1, 1,
			format.BillingExhausted, "insufficient balance: the balance is $-2.50, $0.00 of it held by requests in flight; this request could cost up to $0.000000001; top up the account"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kind, msg := refusal(tc.d, tc.hold, tc.tokens)
			if kind != tc.kind || msg != tc.want {
				t.Fatalf("got %v %q\nwant %v %q", kind, msg, tc.kind, tc.want)
			}
		})
	}
}
