package e2e

import (
	"bufio"
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/modelgateway/gateway/internal/config"
	"github.com/modelgateway/gateway/test/launch"
	"github.com/modelgateway/gateway/test/launch/launchtest"
)

const imagesPath = "/beta/v1/images/generations"

// imageUsage is the usage an image generation reply (or a stream's
// completed event) reports.
type imageUsage struct {
	InputTokens        int64 `json:"input_tokens"`
	OutputTokens       int64 `json:"output_tokens"`
	InputTokensDetails struct {
		TextTokens  int64 `json:"text_tokens"`
		ImageTokens int64 `json:"image_tokens"`
	} `json:"input_tokens_details"`
}

// imageCost computes, from the catalogue entry alone, what reported usage
// costs in nano-USD, rounded up once: text input at input_cost_per_token,
// image input at input_cost_per_image_token, the output (image tokens) at
// output_cost_per_image_token.
func imageCost(t *testing.T, e map[string]any, us ...imageUsage) int64 {
	t.Helper()
	var terms []priceTerm
	for _, u := range us {
		terms = append(terms,
			priceTerm{u.InputTokensDetails.TextTokens, "input_cost_per_token"},
			priceTerm{u.InputTokensDetails.ImageTokens, "input_cost_per_image_token"},
			priceTerm{u.OutputTokens, "output_cost_per_image_token"})
	}
	return entryCost(t, e, terms...)
}

// Image generation through Envoy, billed from the catalogue to the
// nano-USD: GPT image models from the reply's usage, JSON and streamed
// with partial images; dall-e-3, which the catalogue does not price for
// OpenAI, refused as an unknown model unless the operator prices it per
// image, then billed per image the reply carries. Bad requests are 400 in
// OpenAI's shape and never reach the vendor.
func TestImageGenerations(t *testing.T) {
	const dalleUSD = 0.04
	s := launchtest.Start(t, launch.Options{Configure: func(c *config.Config) {
		beta, ok := c.Upstream("beta")
		if !ok {
			t.Fatal("no upstream beta")
		}
		if beta.Models.Overrides == nil {
			beta.Models.Overrides = map[string]config.Price{}
		}
		per := dalleUSD
		beta.Models.Overrides["dall-e-3"] = config.Price{Images: &per} // priced per image alone
	}})
	acct := s.NewAccount(100, noLimits)
	cat := catalogueEntries(t, s.Config.Catalogue)
	ctx := context.Background()

	calls := []struct {
		model, body string
		stream      bool
	}{
		{"gpt-image-1", `{"model":"gpt-image-1","prompt":"A lighthouse on a cliff at dawn","n":2,"size":"1024x1536","quality":"high"}`, false},
		{"gpt-image-1", `{"model":"gpt-image-1","prompt":"A lighthouse","stream":true,"partial_images":2,"quality":"low"}`, true},
		{"gpt-image-1-mini", `{"model":"gpt-image-1-mini","prompt":"A small lighthouse"}`, false},
		{"dall-e-3", `{"model":"dall-e-3","prompt":"A lighthouse","n":1,"size":"1024x1024"}`, false},
	}
	var want []int64
	for _, c := range calls {
		resp, out := s.Do("POST", imagesPath, chatCompletionsHeaders(acct.Key), []byte(c.body))
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", c.model, resp.StatusCode, out)
		}
		if c.model == "dall-e-3" {
			var r struct{ Data []any }
			mustJSON(t, out, &r)
			want = append(want, int64(len(r.Data))*int64(dalleUSD*1e9))
			continue
		}
		var us []imageUsage
		if c.stream {
			evs := readEvents(t, bufio.NewReader(bytes.NewReader(out)))
			for _, ev := range evs {
				var e struct {
					Type  string
					Usage imageUsage
				}
				mustJSON(t, []byte(ev.Data), &e)
				if e.Type == "image_generation.completed" {
					us = append(us, e.Usage)
				}
			}
			if len(evs) != 3 || len(us) != 1 {
				t.Fatalf("%s stream: %s", c.model, out)
			}
		} else {
			var r struct{ Usage imageUsage }
			mustJSON(t, out, &r)
			us = append(us, r.Usage)
		}
		if us[0].OutputTokens == 0 || us[0].InputTokensDetails.TextTokens == 0 {
			t.Fatalf("%s: the vendor reported %+v", c.model, us)
		}
		want = append(want, imageCost(t, cat[c.model], us...))
	}
	entries, _, err := s.Store.Ledger(ctx, acct.ID, "", 20)
	if err != nil || len(entries) != len(calls) {
		t.Fatalf("ledger: %d entries, %v", len(entries), err)
	}
	for j, e := range entries { // oldest first
		if e.Cost != want[j] || e.Estimated || e.Status != 200 || string(e.Requested) != calls[j].model || e.Stream != calls[j].stream {
			t.Errorf("%s (stream %v): cost %d, want %d: %+v", calls[j].model, calls[j].stream, e.Cost, want[j], e.Settlement)
		}
	}
	if e := entries[0]; e.Usage.ImageOutput != 2*6240 || e.Usage.Output != 0 || e.Usage.Input == 0 {
		t.Errorf("gpt-image-1 usage %+v", e.Usage)
	}
	if e := entries[3]; e.Usage.Images != 1 {
		t.Errorf("dall-e-3 usage %+v", e.Usage)
	}

	before := s.Primary.APIRequests()
	for _, bad := range []struct{ body, want string }{
		{`{"model":"gpt-image-1"}`, "prompt"},
		{`{"model":"gpt-image-1","prompt":"x","n":11}`, "n"},
		{`{"model":"dall-e-2","prompt":"x"}`, "model_not_found"}, // the catalogue prices no OpenAI dall-e
	} {
		resp, out := s.Do("POST", imagesPath, chatCompletionsHeaders(acct.Key), []byte(bad.body))
		checkError(t, imagesPath, resp.StatusCode, resp.Header.Get("content-type"), out, 400, "", "")
		if !strings.Contains(string(out), bad.want) {
			t.Errorf("%s refused with %s", bad.body, out)
		}
	}
	if after := s.Primary.APIRequests(); after != before {
		t.Errorf("%d refused requests reached the vendor", after-before)
	}
	if u := s.Usage(acct.Key, "day")["usage"].(map[string]any); u["requests"] != float64(len(calls)) || u["images"] != float64(1) || u["image_output_tokens"] == float64(0) {
		t.Errorf("usage %v", u)
	}
}
