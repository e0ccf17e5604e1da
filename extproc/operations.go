package extproc

import (
	"strings"

	"github.com/modelgateway/gateway/extproc/format"
	"github.com/modelgateway/gateway/extproc/format/chatcompletions"
	"github.com/modelgateway/gateway/extproc/format/embeddings"
	"github.com/modelgateway/gateway/extproc/format/messages"
	"github.com/modelgateway/gateway/extproc/format/responses"
)

// An Operation is one metered API of an upstream, in its own wire format:
// the format that reads its requests and meters its replies, the catalogue
// modes of the models it serves, and the vendor paths it answers.
type Operation struct {
	Name   string
	Format format.Format
	// Modes are the catalogue modes of the models the operation serves; a
	// model's supported_endpoints, when listed, must include Routes[0]'s
	// path (see pricing.Model.Serves).
	Modes  []string
	Routes []Route
}

// Path is the operation's main vendor path, as the catalogue's
// supported_endpoints name it.
func (op *Operation) Path() string { return op.Routes[0].Path }

// A Route is one vendor path of an operation and how the gateway treats it.
type Route struct {
	Method string
	// Path is after the upstream's prefix; a segment "{id}" stands for the
	// id of a stored object.
	Path string
	Kind RouteKind
	// Query lists the query parameters the vendor defines on the path;
	// every other parameter is dropped.
	Query []string
}

// RouteKind says what the gateway does with a request on a route.
type RouteKind int

const (
	// Metered: the body is admitted against the account and the reply is
	// billed. A previous_response_id in the body must be the account's.
	Metered RouteKind = iota
	// Counted: forwarded free (a token count), once a previous_response_id
	// in the body has been found to be the account's.
	Counted
	// Owned: the path names a stored response; forwarded only for the
	// account that created it, never billed again.
	Owned
)

// operations are the metered operations the gateway knows, by name. Adding
// one is a wire-format package, an entry here, and its name in an
// upstream's operations list in gateway.yaml (config.Operations lists the
// names each vendor API accepts).
var operations = map[string]Operation{
	"messages": {
		Format: messages.Format{}, Modes: []string{"chat"},
		Routes: []Route{{Method: "POST", Path: "/v1/messages", Query: []string{"beta"}}},
	},
	"chat_completions": {
		Format: chatcompletions.Format{}, Modes: []string{"chat"},
		Routes: []Route{{Method: "POST", Path: "/v1/chat/completions"}},
	},
	"responses": {
		Format: responses.Format{}, Modes: []string{"chat", "responses"},
		Routes: []Route{
			{Method: "POST", Path: "/v1/responses"},
			{Method: "POST", Path: "/v1/responses/compact"},
			{Method: "POST", Path: "/v1/responses/input_tokens", Kind: Counted},
			{Method: "GET", Path: "/v1/responses/{id}", Kind: Owned, Query: []string{"include", "include[]", "stream", "starting_after", "include_obfuscation"}},
			{Method: "DELETE", Path: "/v1/responses/{id}", Kind: Owned},
			{Method: "POST", Path: "/v1/responses/{id}/cancel", Kind: Owned},
			{Method: "GET", Path: "/v1/responses/{id}/input_items", Kind: Owned, Query: []string{"after", "before", "limit", "order", "include", "include[]"}},
		},
	},
	"embeddings": {
		Format: embeddings.Format{}, Modes: []string{"embedding"},
		Routes: []Route{{Method: "POST", Path: "/v1/embeddings"}},
	},
}

// match finds the route of "METHOD /path" among the operations': an exact
// path first, then one with an {id} segment. id is the segment's value.
func match(ops []*Operation, method, path string) (op *Operation, r *Route, id string) {
	for _, o := range ops {
		for i := range o.Routes {
			if rt := &o.Routes[i]; rt.Method == method && rt.Path == path {
				return o, rt, ""
			}
		}
	}
	for _, o := range ops {
		for i := range o.Routes {
			rt := &o.Routes[i]
			if rt.Method != method {
				continue
			}
			if v, ok := matchID(rt.Path, path); ok {
				return o, rt, v
			}
		}
	}
	return nil, nil, ""
}

// matchID matches path against a pattern with one "{id}" segment and
// returns the segment's value, which must be a valid response id.
func matchID(pattern, path string) (string, bool) {
	before, after, ok := strings.Cut(pattern, "{id}")
	if !ok || !strings.HasPrefix(path, before) || !strings.HasSuffix(path[len(before):], after) {
		return "", false
	}
	id := path[len(before) : len(path)-len(after)]
	if !responses.ValidID(id) {
		return "", false
	}
	return id, true
}
