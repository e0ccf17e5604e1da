package config

import (
	"fmt"
	"slices"
	"strings"
)

// The client request headers each vendor API documents and the vendors'
// SDKs send: the only ones of a client's headers a vendor hears. An entry
// ending in "*" names a prefix. Left out on purpose: whatever picks where
// the operator's spend lands or whose credential is used (openai-
// organization, openai-project, anthropic-workspace-id, api-key,
// proxy-authorization, cookies) and anything no vendor documents.
var (
	// sdkHeaders are sent by both vendors' SDKs (Stainless-generated):
	// the body's type, what the client accepts, the SDK's identification
	// and retry bookkeeping, and the idempotency key.
	sdkHeaders = []string{"content-type", "accept", "user-agent", "x-stainless-*", "idempotency-key"}
	// messagesHeaders: Anthropic's API version and beta flags, the
	// browser opt-in its SDK sends, and Claude Code's session header.
	messagesHeaders = []string{"anthropic-version", "anthropic-beta", "anthropic-dangerous-direct-browser-access", "x-claude-code-session-id"}
	// chatCompletionsHeaders: OpenAI's beta flags and client request id,
	// and the client identification Codex sends (its session_id header
	// never gets past Envoy, which refuses underscores in header names).
	chatCompletionsHeaders = []string{"openai-beta", "x-client-request-id", "originator", "version"}
)

// DefaultForwardHeaders is upstreams[].forward_headers' default for a
// vendor API (format).
func DefaultForwardHeaders(format string) []string {
	own := chatCompletionsHeaders
	if format == FormatMessages {
		own = messagesHeaders
	}
	return slices.Concat(sdkHeaders, own)
}

// neverForwarded are the client's credentials: the gateway's key, which
// the vendor's replaces, whatever forward_headers lists.
var neverForwarded = []string{"authorization", "x-api-key"}

// validateForwardHeaders checks forward_headers: lower-case header names
// (HTTP/2 and Envoy's header maps are lower case), a "*" only at the end,
// no pseudo-header and no credential.
func validateForwardHeaders(p string, names []string) error {
	for j, name := range names {
		base := strings.TrimSuffix(name, "*")
		switch {
		case base == "" || strings.Contains(base, "*") || !headerToken(base):
			return fmt.Errorf("%s.forward_headers[%d]: %q is not a lower-case header name (a prefix ends in *)", p, j, name)
		case slices.Contains(neverForwarded, base):
			return fmt.Errorf("%s.forward_headers[%d]: %q is the client's credential, never forwarded", p, j, name)
		}
	}
	return nil
}

// headerToken reports whether s is a lower-case HTTP header name.
func headerToken(s string) bool {
	for _, c := range s {
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9', strings.ContainsRune("!#$%&'+-.^_`|~", c):
		default:
			return false
		}
	}
	return true
}
