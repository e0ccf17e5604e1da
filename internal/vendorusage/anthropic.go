package vendorusage

import (
	"fmt"
	"net/url"
	"time"

	"github.com/modelgateway/gateway/internal/usage"
)

// AnthropicPath is the Admin API's Messages usage report.
const AnthropicPath = "/v1/organizations/usage_report/messages"

// AnthropicVersion is the API version the Admin API requires in the
// anthropic-version header.
const AnthropicVersion = "2023-06-01"

// anthropicPage is one page of the Messages usage report: buckets with RFC
// 3339 bounds, each with a result per group.
type anthropicPage struct {
	Data []struct {
		StartingAt time.Time `json:"starting_at"`
		EndingAt   time.Time `json:"ending_at"`
		Results    []struct {
			UncachedInputTokens int64 `json:"uncached_input_tokens"`
			CacheCreation       struct {
				Ephemeral1h int64 `json:"ephemeral_1h_input_tokens"`
				Ephemeral5m int64 `json:"ephemeral_5m_input_tokens"`
			} `json:"cache_creation"`
			CacheReadInputTokens int64 `json:"cache_read_input_tokens"`
			OutputTokens         int64 `json:"output_tokens"`
			ServerToolUse        struct {
				WebSearchRequests int64 `json:"web_search_requests"`
			} `json:"server_tool_use"`
			APIKeyID *string `json:"api_key_id"`
			Model    *string `json:"model"`
		} `json:"results"`
	} `json:"data"`
	HasMore  bool    `json:"has_more"`
	NextPage *string `json:"next_page"`
}

// ParseAnthropic reads one page of the Messages usage report; next is the
// page token to ask for next, "" after the last page.
func ParseAnthropic(b []byte) (rows []Row, next string, err error) {
	var p anthropicPage
	if err := decode("anthropic", b, &p); err != nil {
		return nil, "", err
	}
	for _, bk := range p.Data {
		if bk.StartingAt.IsZero() || bk.EndingAt.IsZero() {
			return nil, "", fmt.Errorf("vendorusage: anthropic usage report: %w", errNoBucketTime)
		}
		for _, r := range bk.Results {
			rows = append(rows, Row{
				Start: bk.StartingAt.UTC(), End: bk.EndingAt.UTC(),
				KeyID: deref(r.APIKeyID), Model: deref(r.Model),
				Tokens: usage.Usage{
					Input:        r.UncachedInputTokens,
					CacheRead:    r.CacheReadInputTokens,
					CacheWrite5m: r.CacheCreation.Ephemeral5m,
					CacheWrite1h: r.CacheCreation.Ephemeral1h,
					Output:       r.OutputTokens,
					WebSearches:  r.ServerToolUse.WebSearchRequests,
				},
			})
		}
	}
	if p.HasMore && p.NextPage != nil {
		next = *p.NextPage
	}
	return rows, next, nil
}

// anthropicQuery asks for [from, to) grouped by key and model. The limit is
// each width's documented maximum number of buckets per page.
func anthropicQuery(from, to time.Time, width Width, page string) url.Values {
	q := anthropicWindow(from, to, width, map[Width]string{Minute: "1440", Hour: "168", Day: "31"}[width], page)
	q["group_by[]"] = []string{"api_key_id", "model"}
	return q
}

// anthropicWindow asks an Admin API report for [from, to) in buckets of
// width, limit of them a page, from page ("": the first).
func anthropicWindow(from, to time.Time, width Width, limit, page string) url.Values {
	q := url.Values{
		"starting_at":  {from.UTC().Format(time.RFC3339)},
		"ending_at":    {to.UTC().Format(time.RFC3339)},
		"bucket_width": {string(width)},
		"limit":        {limit},
	}
	if page != "" {
		q.Set("page", page)
	}
	return q
}
