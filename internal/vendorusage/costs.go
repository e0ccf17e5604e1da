package vendorusage

import (
	"context"
	"encoding/json"
	"fmt"
	"math/big"
	"net/http"
	"net/url"
	"time"

	"github.com/modelgateway/gateway/internal/config"
)

// The cost reports: OpenAI's Costs API and Anthropic's cost report. Both
// bucket by UTC day only.
const (
	OpenAICostsPath    = "/v1/organization/costs"
	AnthropicCostsPath = "/v1/organizations/cost_report"
)

// Cost is what the vendor billed the organization in one day bucket, in
// nano-USD.
type Cost struct {
	Start, End time.Time
	NanoUSD    int64
}

// openAICostPage is one page of the Costs API: amount.value in USD.
type openAICostPage struct {
	Data []struct {
		StartTime int64 `json:"start_time"`
		EndTime   int64 `json:"end_time"`
		Results   []struct {
			Amount struct {
				Value    json.Number `json:"value"`
				Currency string      `json:"currency"`
			} `json:"amount"`
		} `json:"results"`
	} `json:"data"`
	HasMore  bool    `json:"has_more"`
	NextPage *string `json:"next_page"`
}

// anthropicCostPage is one page of the cost report: amount in cents, a
// decimal string.
type anthropicCostPage struct {
	Data []struct {
		StartingAt time.Time `json:"starting_at"`
		EndingAt   time.Time `json:"ending_at"`
		Results    []struct {
			Amount   string `json:"amount"`
			Currency string `json:"currency"`
		} `json:"results"`
	} `json:"data"`
	HasMore  bool    `json:"has_more"`
	NextPage *string `json:"next_page"`
}

// ParseOpenAICosts reads one page of the Costs API.
func ParseOpenAICosts(b []byte) (out []Cost, next string, err error) {
	var p openAICostPage
	if err := decode("openai costs", b, &p); err != nil {
		return nil, "", err
	}
	for _, bk := range p.Data {
		if bk.StartTime == 0 || bk.EndTime == 0 {
			return nil, "", fmt.Errorf("vendorusage: openai costs: %w", errNoBucketTime)
		}
		c := Cost{Start: time.Unix(bk.StartTime, 0).UTC(), End: time.Unix(bk.EndTime, 0).UTC()}
		for _, r := range bk.Results {
			n, err := nanoUSD(string(r.Amount.Value), r.Amount.Currency, "usd", 1_000_000_000)
			if err != nil {
				return nil, "", fmt.Errorf("vendorusage: openai costs: %w", err)
			}
			c.NanoUSD += n
		}
		out = append(out, c)
	}
	if p.HasMore && p.NextPage != nil {
		next = *p.NextPage
	}
	return out, next, nil
}

// ParseAnthropicCosts reads one page of the cost report.
func ParseAnthropicCosts(b []byte) (out []Cost, next string, err error) {
	var p anthropicCostPage
	if err := decode("anthropic costs", b, &p); err != nil {
		return nil, "", err
	}
	for _, bk := range p.Data {
		if bk.StartingAt.IsZero() || bk.EndingAt.IsZero() {
			return nil, "", fmt.Errorf("vendorusage: anthropic costs: %w", errNoBucketTime)
		}
		c := Cost{Start: bk.StartingAt.UTC(), End: bk.EndingAt.UTC()}
		for _, r := range bk.Results {
			n, err := nanoUSD(r.Amount, r.Currency, "USD", 10_000_000) // cents
			if err != nil {
				return nil, "", fmt.Errorf("vendorusage: anthropic costs: %w", err)
			}
			c.NanoUSD += n
		}
		out = append(out, c)
	}
	if p.HasMore && p.NextPage != nil {
		next = *p.NextPage
	}
	return out, next, nil
}

// nanoUSD converts a decimal amount in units of scale nano-USD, rounded to
// the nearest nano-USD; the currency must be want (or absent).
func nanoUSD(amount, currency, want string, scale int64) (int64, error) {
	if currency != "" && currency != want {
		return 0, fmt.Errorf("amount in %q, not %s", currency, want)
	}
	r, ok := new(big.Rat).SetString(amount)
	if !ok {
		return 0, fmt.Errorf("amount %q is not a decimal", amount)
	}
	r.Mul(r, new(big.Rat).SetInt64(scale))
	// Round half away from zero.
	num, den := r.Num(), r.Denom()
	q, m := new(big.Int).QuoRem(num, den, new(big.Int))
	if new(big.Int).Mul(m.Abs(m), big.NewInt(2)).Cmp(den) >= 0 {
		q.Add(q, big.NewInt(int64(num.Sign())))
	}
	if !q.IsInt64() {
		return 0, fmt.Errorf("amount %q out of range", amount)
	}
	return q.Int64(), nil
}

// FetchCosts reads the vendor's daily costs of [from, to), every page,
// from the upstream's admin route of the relay (see Fetch).
func FetchCosts(ctx context.Context, client *http.Client, base, format string, from, to time.Time) ([]Cost, error) {
	var (
		path  string
		parse func([]byte) ([]Cost, string, error)
		query func(page string) url.Values
		hdr   http.Header
	)
	switch format {
	case config.FormatMessages:
		path, parse = AnthropicCostsPath, ParseAnthropicCosts
		query = func(page string) url.Values { return anthropicWindow(from, to, Day, "31", page) }
		hdr = http.Header{"Anthropic-Version": {AnthropicVersion}}
	case config.FormatChatCompletions:
		path, parse = OpenAICostsPath, ParseOpenAICosts
		query = func(page string) url.Values {
			q := openAIWindow(from, to, Day, page)
			q.Set("limit", "180")
			return q
		}
	default:
		return nil, fmt.Errorf("vendorusage: no cost report for format %q", format)
	}
	return fetchPages(ctx, client, base+path, query, hdr, parse)
}
