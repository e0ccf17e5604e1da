// Package vendorusage reads the vendors' own usage reports: OpenAI's
// organization Usage API and Anthropic's Usage and Cost Admin API. Both
// report tokens per time bucket, grouped by API key and model, a page at a
// time; a Row is one group of one bucket, its tokens in the ledger's kinds.
package vendorusage

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/modelgateway/gateway/internal/config"
	"github.com/modelgateway/gateway/internal/usage"
)

// Row is the vendor's usage of one API key and model in one bucket.
type Row struct {
	Start, End time.Time
	// KeyID is the vendor's id of the API key (upstreams[].keys[].
	// vendor_key_id); Model is the model as the vendor names it.
	KeyID, Model string
	// Tokens are in the ledger's kinds: Input is uncached input.
	Tokens usage.Usage
	// Requests is the vendor's count of model requests; OpenAI reports it,
	// Anthropic does not (0).
	Requests int64
}

// Width is a bucket width both vendors support.
type Width string

// The bucket widths.
const (
	Minute Width = "1m"
	Hour   Width = "1h"
	Day    Width = "1d"
)

// Duration is the length of a bucket of width w.
func (w Width) Duration() time.Duration {
	switch w {
	case Minute:
		return time.Minute
	case Hour:
		return time.Hour
	}
	return 24 * time.Hour
}

// maxPages bounds one Fetch: a vendor whose next_page never ends must not
// keep the caller forever.
const maxPages = 1000

// Fetch reads the vendor's report of [from, to) in buckets of width, every
// page, from base: the upstream's admin route of the relay (Envoy adds the
// admin credential there, so the request carries none). format is the
// upstream's wire format (config.FormatMessages or
// config.FormatChatCompletions).
func Fetch(ctx context.Context, client *http.Client, base, format string, from, to time.Time, width Width) ([]Row, error) {
	type report struct {
		path  string
		parse func([]byte) ([]Row, string, error)
	}
	var (
		reports []report
		query   func(page string) url.Values
		hdr     http.Header
	)
	switch format {
	case config.FormatMessages:
		reports = []report{{AnthropicPath, ParseAnthropic}}
		query = func(page string) url.Values { return anthropicQuery(from, to, width, page) }
		hdr = http.Header{"Anthropic-Version": {AnthropicVersion}}
	case config.FormatChatCompletions:
		reports = []report{{OpenAIPath, ParseOpenAI}}
		for _, p := range OpenAIOtherPaths() {
			reports = append(reports, report{p, parseOpenAIOther(p)})
		}
		query = func(page string) url.Values { return openAIQuery(from, to, width, page) }
	default:
		return nil, fmt.Errorf("vendorusage: no usage report for format %q", format)
	}
	var rows []Row
	for _, rp := range reports {
		got, err := fetchPages(ctx, client, base+rp.path, query, hdr, rp.parse)
		if err != nil {
			return nil, err
		}
		rows = append(rows, got...)
	}
	return rows, nil
}

// fetchPages reads every page of one report: usage rows or costs.
func fetchPages[T any](ctx context.Context, client *http.Client, u string, query func(page string) url.Values, hdr http.Header, parse func([]byte) ([]T, string, error)) ([]T, error) {
	var rows []T
	page := ""
	for range maxPages {
		b, err := get(ctx, client, u+"?"+query(page).Encode(), hdr)
		if err != nil {
			return nil, err
		}
		got, next, err := parse(b)
		if err != nil {
			return nil, err
		}
		rows = append(rows, got...)
		if next == "" {
			return rows, nil
		}
		page = next
	}
	return nil, fmt.Errorf("vendorusage: %s: more than %d pages", u, maxPages)
}

// Admin API rate limits: a 429 (or 503) is retried after the vendor's
// retry-after, a few times, waiting at most maxRetryAfter each.
const (
	maxTries      = 5
	maxRetryAfter = time.Minute
)

func get(ctx context.Context, client *http.Client, u string, hdr http.Header) ([]byte, error) {
	for try := 1; ; try++ {
		b, wait, err := getOnce(ctx, client, u, hdr)
		if wait == 0 || try == maxTries {
			return b, err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("vendorusage: waiting out a rate limit: %w", ctx.Err())
		case <-t.C:
		}
	}
}

// getOnce is one GET; wait is how long to wait before another try, 0 when
// the answer is final.
func getOnce(ctx context.Context, client *http.Client, u string, hdr http.Header) (b []byte, wait time.Duration, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, 0, fmt.Errorf("vendorusage: %w", err)
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, 0, fmt.Errorf("vendorusage: %w", err)
	}
	defer resp.Body.Close()
	b, err = io.ReadAll(io.LimitReader(resp.Body, 32<<20))
	if err != nil {
		return nil, 0, fmt.Errorf("vendorusage: reading %s: %w", req.URL.Path, err)
	}
	if resp.StatusCode != http.StatusOK {
		// The vendor's error body names the problem, never a secret.
		err = fmt.Errorf("vendorusage: %s: status %d: %.300s", req.URL.Path, resp.StatusCode, b)
		if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable {
			return nil, RetryAfter(resp.Header.Get("Retry-After")), err
		}
		return nil, 0, err
	}
	return b, 0, nil
}

// RetryAfter reads a Retry-After header (seconds or an HTTP date) into a
// wait between one second and maxRetryAfter.
func RetryAfter(v string) time.Duration {
	d := time.Second
	if s, err := strconv.ParseInt(v, 10, 64); err == nil {
		// Capped before the product, which would overflow for years.
		d = time.Duration(min(s, int64(maxRetryAfter/time.Second))) * time.Second
	} else if t, err := http.ParseTime(v); err == nil {
		d = time.Until(t)
	}
	return min(max(d, time.Second), maxRetryAfter)
}

// decode is json.Unmarshal with the error wrapped for the vendor's report.
func decode(vendor string, b []byte, v any) error {
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("vendorusage: %s usage report: %w", vendor, err)
	}
	return nil
}

var errNoBucketTime = errors.New("bucket without its start or end")
