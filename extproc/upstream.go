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
	Prices *pricing.Table
	// MeteredPath is the one POST path that is billed, after the prefix.
	MeteredPath string
	// freePaths are "METHOD /path" forwarded with a valid model key and not
	// billed (model listings, token counting); freePrefixes hold those
	// written with a trailing "*".
	freePaths    map[string]bool
	freePrefixes []string

	prefix string // "/NAME/"
}

// NewUpstream builds the processor's view of one configured upstream. The
// vendor's credential is not part of it: Envoy injects it.
func NewUpstream(u config.Upstream) (*Upstream, error) {
	r := &Upstream{
		Name:      u.Name,
		Prices:    pricing.NewTable(u.Models),
		freePaths: make(map[string]bool),
		prefix:    "/" + u.Name + "/",
	}
	switch u.Format {
	case config.FormatMessages:
		r.Format, r.MeteredPath = messages.Format{}, "/v1/messages"
	case config.FormatChatCompletions:
		r.Format, r.MeteredPath = chatcompletions.Format{}, "/v1/chat/completions"
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
