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
	var (
		path  string
		parse func([]byte) ([]Row, string, error)
		query func(page string) url.Values
		hdr   http.Header
	)
	switch format {
	case config.FormatMessages:
		path, parse, query = AnthropicPath, ParseAnthropic, func(page string) url.Values {
			return anthropicQuery(from, to, width, page)
		}
		hdr = http.Header{"Anthropic-Version": {AnthropicVersion}}
	case config.FormatChatCompletions:
		path, parse, query = OpenAIPath, ParseOpenAI, func(page string) url.Values {
			return openAIQuery(from, to, width, page)
		}
	default:
		return nil, fmt.Errorf("vendorusage: no usage report for format %q", format)
	}
	var rows []Row
	page := ""
	for range maxPages {
		b, err := get(ctx, client, base+path+"?"+query(page).Encode(), hdr)
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
	return nil, fmt.Errorf("vendorusage: %s: more than %d pages", path, maxPages)
}

func get(ctx context.Context, client *http.Client, u string, hdr http.Header) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("vendorusage: %w", err)
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("vendorusage: %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 32<<20))
	if err != nil {
		return nil, fmt.Errorf("vendorusage: reading %s: %w", req.URL.Path, err)
	}
	if resp.StatusCode != http.StatusOK {
		// The vendor's error body names the problem, never a secret.
		return nil, fmt.Errorf("vendorusage: %s: status %d: %.300s", req.URL.Path, resp.StatusCode, b)
	}
	return b, nil
}

// decode is json.Unmarshal with the error wrapped for the vendor's report.
func decode(vendor string, b []byte, v any) error {
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("vendorusage: %s usage report: %w", vendor, err)
	}
	return nil
}

var errNoBucketTime = errors.New("bucket without its start or end")
