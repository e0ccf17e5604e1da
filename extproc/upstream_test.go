package extproc

import (
	"testing"

	"github.com/modelgateway/gateway/internal/config"
	"github.com/modelgateway/gateway/internal/pricing"
)

func TestFreePaths(t *testing.T) {
	r, err := NewUpstream(config.Upstream{
		Name: "alpha", Format: config.FormatMessages,
		FreePaths: []string{"GET /v1/models", "GET /v1/models/*", "POST /v1/messages/count_tokens"},
	}, "k", &pricing.Table{})
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
