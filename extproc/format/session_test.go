package format_test

import (
	"testing"

	"github.com/modelgateway/gateway/extproc/format"
	"github.com/modelgateway/gateway/extproc/format/chatcompletions"
	"github.com/modelgateway/gateway/extproc/format/embeddings"
	"github.com/modelgateway/gateway/extproc/format/messages"
	"github.com/modelgateway/gateway/extproc/format/responses"
)

// Each format reads the body's session marker in its one pass over the
// body: prompt_cache_key first, then metadata.user_id or user, as its API
// has them; only a string is a marker.
func TestSessionReadWithTheRequest(t *testing.T) {
	cases := []struct {
		name string
		f    format.Format
		body string
		want string
	}{
		{"messages", messages.Format{}, `{"model":"m","max_tokens":5,"messages":[],"metadata":{"user_id":"u-1"}}`, "u-1"},
		{"messages without", messages.Format{}, `{"model":"m","max_tokens":5,"messages":[]}`, ""},
		{"chat: cache key first", chatcompletions.Format{}, `{"user":"u-2","model":"m","messages":[],"prompt_cache_key":"ck-2"}`, "ck-2"},
		{"chat: user", chatcompletions.Format{}, `{"model":"m","messages":[],"user":"u-3"}`, "u-3"},
		{"chat: not a string", chatcompletions.Format{}, `{"model":"m","messages":[],"user":7}`, ""},
		{"responses: cache key first", responses.Format{}, `{"model":"m","input":"hi","user":"u-4","prompt_cache_key":"ck-4"}`, "ck-4"},
		{"responses: user", responses.Format{}, `{"model":"m","input":"hi","user":"u-5"}`, "u-5"},
		{"embeddings", embeddings.Format{}, `{"model":"m","input":"hi","user":"u-6"}`, "u-6"},
	}
	for _, c := range cases {
		req, err := c.f.ParseRequest([]byte(c.body), "application/json")
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if req.Session != c.want {
			t.Errorf("%s: session %q; want %q", c.name, req.Session, c.want)
		}
	}
}
