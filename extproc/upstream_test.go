package extproc

import (
	"strings"
	"testing"
	"time"

	"github.com/modelgateway/gateway/extproc/format/embeddings"
	"github.com/modelgateway/gateway/extproc/operation"
	"github.com/modelgateway/gateway/extproc/operations"
	"github.com/modelgateway/gateway/internal/config"
	"github.com/modelgateway/gateway/internal/pricing"
)

func TestFreePaths(t *testing.T) {
	r, err := NewUpstream(config.Upstream{
		Name: "alpha", Format: config.FormatMessages,
		FreePaths: []string{"GET /v1/models", "GET /v1/models/*", "POST /v1/messages/count_tokens"},
	}, &pricing.Table{}, operations.All)
	if err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]bool{
		"GET /v1/models":                 true,
		"GET /v1/models/claude-x":        true,
		"GET /v1/models/a/b":             false, // one segment only
		"POST /v1/models/x":              false,
		"POST /v1/messages/count_tokens": true,
		"POST /v1/messages":              false,
		"GET /v1/modelsx":                false,
	} {
		if got := r.isFree(p); got != want {
			t.Errorf("isFree(%q) = %v, want %v", p, got, want)
		}
	}
}

func TestForwardQuery(t *testing.T) {
	alpha, _ := NewUpstream(config.Upstream{Name: "alpha", Format: config.FormatMessages}, &pricing.Table{}, operations.All)
	beta, _ := NewUpstream(config.Upstream{Name: "beta", Format: config.FormatChatCompletions, Operations: []string{"chat_completions", "responses"}}, &pricing.Table{}, operations.All)
	for _, tc := range []struct {
		u          *Upstream
		sub, query string
		want       string
	}{
		{alpha, "/v1/messages", "beta=true", "beta=true"},
		{alpha, "/v1/messages", "key=cr_secret&beta=true&x=1", "beta=true"},
		{alpha, "/v1/models", "limit=5&after_id=m1&x=y", "limit=5&after_id=m1"},
		{alpha, "/v1/models/claude-x", "beta=true&limit=3", "beta=true"},
		{alpha, "/v1/messages", "", ""},
		// ";" separates parameters too: the smuggled one never reaches the vendor.
		{alpha, "/v1/messages", "beta=true;stream=true", "beta=true"},
		{alpha, "/v1/models", "limit=5;key=x&after_id=m1", "limit=5&after_id=m1"},
		{beta, "/v1/chat/completions", "api-version=1&key=x", ""},
		{beta, "/v1/models", "limit=5", ""},
		{beta, "/v1/responses/resp_1", "stream=true&starting_after=7&key=x", "stream=true&starting_after=7"},
		{beta, "/v1/responses/resp_1/input_items", "limit=2&order=asc&stream=true", "limit=2&order=asc"},
		{beta, "/v1/responses", "stream=true", ""},
	} {
		_, vp, _ := operation.Match(tc.u.Operations, map[bool]string{true: "GET", false: "POST"}[strings.HasPrefix(tc.sub, "/v1/models") || strings.HasPrefix(tc.sub, "/v1/responses/")], tc.sub)
		if got := tc.u.forwardQuery(vp, tc.sub, tc.query); got != tc.want {
			t.Errorf("%s %s?%s: %q, want %q", tc.u.Name, tc.sub, tc.query, got, tc.want)
		}
	}
}

// The wait for a reply's headers is scaled from what the request asked for:
// its input at the prefill rate, and, when not streaming, its output at the
// generation rate; at most the longest request.
func TestFirstByteBound(t *testing.T) {
	u := config.Upstream{Name: "alpha", Format: config.FormatMessages}
	u.Failover.FirstByteTimeout = config.Duration(10 * time.Second)
	u.Failover.PrefillTokensPerSecond, u.Failover.GenerationTokensPerSecond = 5000, 20
	up, err := NewUpstream(u, &pricing.Table{}, operations.All)
	if err != nil {
		t.Fatal(err)
	}
	up.MaxDuration = 15 * time.Minute
	for _, tc := range []struct {
		stream        bool
		input, output int64
		want          time.Duration
	}{
		{true, 5000, 64000, 11 * time.Second},
		{false, 5000, 256, 11*time.Second + 12800*time.Millisecond},
		{false, 0, 64000, 15 * time.Minute},
		{true, 1 << 40, 0, 15 * time.Minute},
	} {
		if got := up.firstByteBound(tc.stream, tc.input, tc.output); got != tc.want {
			t.Errorf("stream %v, %d in, %d out: %v, want %v", tc.stream, tc.input, tc.output, got, tc.want)
		}
	}
}

// The operations an upstream lists come from the registry: a name it does
// not know, one of another vendor API, or one listed twice is refused,
// naming those the upstream's API serves.
func TestUpstreamOperationsFromTheRegistry(t *testing.T) {
	for _, ops := range [][]string{{"chat_completions", "speech"}, {"messages"}, {"responses", "responses"}} {
		_, err := NewUpstream(config.Upstream{Name: "beta", Format: config.FormatChatCompletions, Operations: ops}, &pricing.Table{}, operations.All)
		if err == nil || !strings.Contains(err.Error(), strings.Join(operations.All.Names(config.FormatChatCompletions), ", ")) {
			t.Errorf("operations %v: %v; want a refusal naming the API's operations", ops, err)
		}
	}
	up, err := NewUpstream(config.Upstream{Name: "beta", Format: config.FormatChatCompletions, Operations: []string{"embeddings"}}, &pricing.Table{}, operations.All)
	if err != nil || len(up.Operations) != 1 || up.Operations[0] != &embeddings.Operation {
		t.Fatalf("%+v, %v", up, err)
	}
}
