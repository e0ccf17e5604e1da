package sse

import "strings"

// IsEventStream reports whether a Content-Type header value names
// text/event-stream, ignoring case, parameters and surrounding space.
func IsEventStream(contentType string) bool {
	mediaType, _, _ := strings.Cut(contentType, ";")
	return strings.EqualFold(strings.TrimSpace(mediaType), "text/event-stream")
}
