package vendorusage

import (
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"time"

	"github.com/modelgateway/gateway/internal/usage"
)

// OpenAIPath is the organization Usage API's completions report.
const OpenAIPath = "/v1/organization/usage/completions"

// openAIPage is one page of the completions usage report: buckets with
// Unix-second bounds, each with a result per group.
type openAIPage struct {
	Object string `json:"object"` // "page"
	Data   []struct {
		Object    string `json:"object"` // "bucket"
		StartTime int64  `json:"start_time"`
		EndTime   int64  `json:"end_time"`
		Results   []struct {
			Object string `json:"object"` // "organization.usage.completions.result"
			// InputTokens includes the cached ones (InputCachedTokens);
			// audio and image tokens (the GPT image models') are counted
			// apart.
			InputTokens       int64   `json:"input_tokens"`
			InputCachedTokens int64   `json:"input_cached_tokens"`
			OutputTokens      int64   `json:"output_tokens"`
			InputAudioTokens  int64   `json:"input_audio_tokens"`
			OutputAudioTokens int64   `json:"output_audio_tokens"`
			InputImageTokens  int64   `json:"input_image_tokens"`
			OutputImageTokens int64   `json:"output_image_tokens"`
			NumModelRequests  int64   `json:"num_model_requests"`
			APIKeyID          *string `json:"api_key_id"`
			Model             *string `json:"model"`
		} `json:"results"`
	} `json:"data"`
	HasMore  bool    `json:"has_more"`
	NextPage *string `json:"next_page"`
}

// ParseOpenAI reads one page of the completions usage report; next is the
// page token to ask for next, "" after the last page.
func ParseOpenAI(b []byte) (rows []Row, next string, err error) {
	var p openAIPage
	if err := decode("openai", b, &p); err != nil {
		return nil, "", err
	}
	for _, bk := range p.Data {
		if bk.StartTime == 0 || bk.EndTime == 0 {
			return nil, "", fmt.Errorf("vendorusage: openai usage report: %w", errNoBucketTime)
		}
		for _, r := range bk.Results {
			if r.InputCachedTokens > r.InputTokens {
				return nil, "", fmt.Errorf("vendorusage: openai usage report: %d cached input tokens of %d", r.InputCachedTokens, r.InputTokens)
			}
			rows = append(rows, Row{
				Start: time.Unix(bk.StartTime, 0).UTC(), End: time.Unix(bk.EndTime, 0).UTC(),
				KeyID: deref(r.APIKeyID), Model: deref(r.Model),
				Tokens: usage.Usage{
					Input:       r.InputTokens - r.InputCachedTokens,
					CacheRead:   r.InputCachedTokens,
					Output:      r.OutputTokens,
					AudioInput:  r.InputAudioTokens,
					AudioOutput: r.OutputAudioTokens,
					ImageInput:  r.InputImageTokens,
					ImageOutput: r.OutputImageTokens,
				},
				Requests: r.NumModelRequests,
			})
		}
	}
	if p.HasMore && p.NextPage != nil {
		next = *p.NextPage
	}
	return rows, next, nil
}

// openAIQuery asks for [from, to) grouped by key and model, the report's
// default number of buckets a page.
func openAIQuery(from, to time.Time, width Width, page string) url.Values {
	q := openAIWindow(from, to, width, page)
	q["group_by"] = []string{"api_key_id", "model"}
	return q
}

// openAIWindow asks an organization report for [from, to) in buckets of
// width, from page ("": the first).
func openAIWindow(from, to time.Time, width Width, page string) url.Values {
	q := url.Values{
		"start_time":   {strconv.FormatInt(from.Unix(), 10)},
		"end_time":     {strconv.FormatInt(to.Unix(), 10)},
		"bucket_width": {string(width)},
	}
	if page != "" {
		q.Set("page", page)
	}
	return q
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// OpenAI's other usage reports, read beside the completions one: each
// names its counts in the ledger's kinds.
var openAIOther = map[string]func(r openAIOtherResult) usage.Usage{
	"/v1/organization/usage/embeddings":           func(r openAIOtherResult) usage.Usage { return usage.Usage{Input: r.InputTokens} },
	"/v1/organization/usage/audio_transcriptions": func(r openAIOtherResult) usage.Usage { return usage.Usage{AudioSeconds: r.Seconds} },
	"/v1/organization/usage/images":               func(r openAIOtherResult) usage.Usage { return usage.Usage{Images: r.Images} },
}

// openAIOtherResult is a result of the embeddings, audio transcriptions or
// images report.
type openAIOtherResult struct {
	InputTokens      int64   `json:"input_tokens"`
	Seconds          int64   `json:"seconds"`
	Images           int64   `json:"images"`
	NumModelRequests int64   `json:"num_model_requests"`
	APIKeyID         *string `json:"api_key_id"`
	Model            *string `json:"model"`
}

// parseOpenAIOther reads one page of the report at path.
func parseOpenAIOther(path string) func([]byte) ([]Row, string, error) {
	tokens := openAIOther[path]
	return func(b []byte) (rows []Row, next string, err error) {
		var p struct {
			Data []struct {
				StartTime int64               `json:"start_time"`
				EndTime   int64               `json:"end_time"`
				Results   []openAIOtherResult `json:"results"`
			} `json:"data"`
			HasMore  bool    `json:"has_more"`
			NextPage *string `json:"next_page"`
		}
		if err := decode("openai", b, &p); err != nil {
			return nil, "", err
		}
		for _, bk := range p.Data {
			if bk.StartTime == 0 || bk.EndTime == 0 {
				return nil, "", fmt.Errorf("vendorusage: openai usage report %s: %w", path, errNoBucketTime)
			}
			for _, r := range bk.Results {
				rows = append(rows, Row{
					Start: time.Unix(bk.StartTime, 0).UTC(), End: time.Unix(bk.EndTime, 0).UTC(),
					KeyID: deref(r.APIKeyID), Model: deref(r.Model), Tokens: tokens(r), Requests: r.NumModelRequests,
				})
			}
		}
		if p.HasMore && p.NextPage != nil {
			next = *p.NextPage
		}
		return rows, next, nil
	}
}

// OpenAIOtherPaths are the paths of OpenAI's other usage reports.
func OpenAIOtherPaths() []string { return slices.Sorted(maps.Keys(openAIOther)) }
