package extproc

import (
	"fmt"
	"strings"

	"github.com/modelgateway/gateway/extproc/format"
	"github.com/modelgateway/gateway/extproc/format/chatcompletions"
	"github.com/modelgateway/gateway/extproc/format/messages"
	"github.com/modelgateway/gateway/internal/config"
	"github.com/modelgateway/gateway/internal/pricing"
)

// Upstream is one vendor, reached under /NAME/, /NAME/..., as the processor sees it.
type Upstream struct {
	Name   string
	Format format.Format
	// Prices finds a model's prices; its contents are replaced on reload.
	Prices *pricing.Table
	// MeteredPath is the one POST path that is billed, after the prefix.
	MeteredPath string
	// freePaths are "METHOD /path" forwarded with a valid model key and not
	// billed (model listings, token counting); freePrefixes hold those
	// written with a trailing "*".
	freePaths    map[string]bool
	freePrefixes []string

	prefix     string // "/NAME/"
	credHeader string // header that carries the vendor credential
	credValue  string // its value; empty when no vendor key is configured
}

// NewUpstream builds the processor's view of one configured upstream. credential is the
// vendor key, or empty to forward without one (a self-hosted model server).
// prices is the upstream's price table.
func NewUpstream(u config.Upstream, credential string, prices *pricing.Table) (*Upstream, error) {
	if prices == nil {
		return nil, fmt.Errorf("upstream %s: no price table", u.Name)
	}
	r := &Upstream{
		Name:      u.Name,
		Prices:    prices,
		freePaths: make(map[string]bool),
		prefix:    "/" + u.Name + "/",
	}
	switch u.Format {
	case config.FormatMessages:
		r.Format, r.MeteredPath = messages.Format{}, "/v1/messages"
		r.credHeader, r.credValue = "x-api-key", credential
	case config.FormatChatCompletions:
		r.Format, r.MeteredPath = chatcompletions.Format{}, "/v1/chat/completions"
		r.credHeader = "authorization"
		if credential != "" {
			r.credValue = "Bearer " + credential
		}
	default:
		return nil, fmt.Errorf("upstream %s: unknown format %q", u.Name, u.Format)
	}
	for _, fp := range u.FreePaths {
		method, path, err := config.ParseFreePath(fp)
		if err != nil {
			return nil, fmt.Errorf("upstream %s: %w", u.Name, err)
		}
		if prefix, ok := strings.CutSuffix(path, "*"); ok {
			r.freePrefixes = append(r.freePrefixes, method+" "+prefix)
			continue
		}
		r.freePaths[method+" "+path] = true
	}
	return r, nil
}

// isFree reports whether "METHOD /path" is a free read-only vendor path.
func (r *Upstream) isFree(methodPath string) bool {
	if r.freePaths[methodPath] {
		return true
	}
	for _, p := range r.freePrefixes {
		if strings.HasPrefix(methodPath, p) && !strings.Contains(methodPath[len(p):], "/") {
			return true
		}
	}
	return false
}
