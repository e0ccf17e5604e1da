package e2e

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/modelgateway/gateway/extproc/operations"
	"github.com/modelgateway/gateway/internal/config"
	"github.com/modelgateway/gateway/internal/pricing"
)

// The pinned catalogue, read for gateway.yaml's providers and the modes
// the registered operations serve: every price field of those entries is
// known (read, or not read for a stated reason), and the entries loaded
// as no model are listed here with why. Today they are the per-image
// estimates of the GPT image models at one size and quality; gpt-image-1
// and the other image models priced by tokens load (all 56 of OpenAI's
// image generation entries accounted for).
func TestCatalogueEntriesNotServed(t *testing.T) {
	if testing.Short() {
		t.Skip("reads the pinned catalogue (make catalogue)")
	}
	cfg, err := config.Load(filepath.Join("..", "..", "gateway.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var providers []string
	for _, u := range cfg.Upstreams {
		providers = append(providers, u.Models.Providers...)
	}
	data, err := os.ReadFile(cfg.Catalogue)
	if err != nil {
		t.Fatalf("catalogue: %v (run `make catalogue`)", err)
	}
	models, unread, err := pricing.ReadCatalogue(data, providers, operations.All.Modes())
	if err != nil {
		t.Fatal(err)
	}
	if len(unread.Fields) > 0 {
		t.Errorf("price fields the gateway does not know: %v", unread.Fields)
	}
	images := 0
	for _, e := range models {
		if e.Mode == "image_generation" && e.Provider == "openai" {
			images++
		}
	}
	for _, s := range unread.Entries {
		t.Logf("not served: %s: %s", s.Name, s.Reason)
		m := sizedEstimate.FindString(s.Name)
		if m == "" || models[strings.TrimPrefix(s.Name, m)].Name == "" || !strings.HasPrefix(s.Reason, "a per-image estimate of") {
			t.Errorf("%s not served: %s", s.Name, s.Reason)
		}
	}
	if _, ok := models["gpt-image-1"]; !ok || images+len(unread.Entries) != 56 || !slices.ContainsFunc(unread.Entries, func(s pricing.Skipped) bool { return s.Name == "high/1024-x-1536/gpt-image-1" }) {
		t.Errorf("image entries: %d loaded, %d not served; gpt-image-1 loaded %v", images, len(unread.Entries), ok)
	}
}
