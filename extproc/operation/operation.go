// Package operation defines what one metered vendor API brings to the
// gateway, as one value its wire-format package exports: its vendor paths and
// the query parameters the vendor defines there, the catalogue modes of
// the models it serves, its trace names, its wire format (request fields,
// meter, errors) and its hold rule. The processor knows operations only
// through this type; the list in package operations registers them.
package operation

import (
	"math"
	"net/http"
	"slices"
	"strings"

	"github.com/modelgateway/gateway/extproc/format"
	"github.com/modelgateway/gateway/internal/pricing"
	"github.com/modelgateway/gateway/internal/usage"
)

// An Operation is one metered API of a vendor.
type Operation struct {
	// Name is the operation's name in gateway.yaml's operations lists.
	Name string
	// API is the vendor API (an upstream's format) that serves it.
	API string
	// Format reads its requests, meters its replies and writes its errors.
	Format format.Format
	// Modes are the catalogue modes of the models the operation serves; a
	// model's supported_endpoints, when listed, must include Paths[0]'s
	// path (see pricing.Model.Serves).
	Modes []string
	// Routes are its vendor paths; the first is the one it meters.
	Paths []Path
	// GenAI names it in traces, as OpenTelemetry's GenAI conventions do.
	GenAI GenAI
	// Bounds is its hold rule: the most input and output a request can
	// use. Nil is TextBounds.
	Bounds func(price *pricing.Model, req format.Request, body []byte) Bounds
	// ValidID checks the "{id}" segment of its paths; nil when no path
	// has one.
	ValidID func(id string) bool
	// References reads the stored objects a request on a Counted path
	// names (forwarded only when each is the account's), or refuses it as
	// ParseRequest would; nil when none can.
	References func(body []byte) ([]format.Ref, error)
	// Poll is the path that reads a stored object's state ("{id}" for its
	// id), where a background request is watched until it ends; empty
	// when the operation has no background requests.
	Poll string
	// FreeQuery lists, by vendor path, the query parameters the vendor
	// defines on the API's free paths (a path ending "/*" stands for one
	// more segment); set on the API's own operation (Name == API).
	FreeQuery map[string][]string
	// Socket is its WebSocket transport; nil when it has none.
	Socket *Socket
}

// Socket is an operation's WebSocket transport as its vendor defines it:
// the client upgrades GET Path and sends Create messages, each a request
// of Path whose reply comes back as the events of a stream, one message
// each; the transport knows the operation only through this.
type Socket struct {
	// Path is the vendor path upgraded, a Metered path of the operation.
	Path string
	// Create is the type of the client message that starts a request.
	Create string
	// Error is the type of the vendor's error event, which carries the
	// status an HTTP reply would have had.
	Error string
	// Ends lists the event types that end a request's reply (Error
	// included).
	Ends []string
	// ErrorEvent is the error event of an HTTP refusal of status, with
	// the headers that tell the client what to do (retry-after,
	// x-should-retry, …; nil for none) and its body in the operation's
	// format.
	ErrorEvent func(status int, header http.Header, body []byte) []byte
}

// Ended reports whether an event of type typ ends a request's reply.
func (s *Socket) Ended(typ string) bool { return slices.Contains(s.Ends, typ) }

// Path is the operation's main vendor path, as the catalogue's
// supported_endpoints name it.
func (op *Operation) Path() string { return op.Paths[0].Path }

// RequestBounds applies the operation's hold rule.
func (op *Operation) RequestBounds(price *pricing.Model, req format.Request, body []byte) Bounds {
	if op.Bounds == nil {
		return TextBounds(price, req, body)
	}
	return op.Bounds(price, req, body)
}

// GenAI is how traces name an operation: gen_ai.operation.name and
// gen_ai.provider.name.
type GenAI struct {
	Operation, Provider string
}

// A Path is one vendor path of an operation and how the gateway treats it.
type Path struct {
	Method string
	// Path is after the upstream's prefix; a segment "{id}" stands for the
	// id of a stored object (Operation.ValidID).
	Path string
	Kind PathKind
	// Query lists the query parameters the vendor defines on the path;
	// every other parameter is dropped.
	Query []string
}

// PathKind says what the gateway does with a request on a path.
type PathKind int

const (
	// Metered: the body is admitted against the account and the reply is
	// billed. The stored objects the body names must be the account's.
	Metered PathKind = iota
	// Counted: forwarded free (a token count), once the stored objects the
	// body names (Operation.References) are found to be the account's.
	Counted
	// Owned: the path names a stored object; forwarded only for the
	// account that created it, never billed again.
	Owned
)

// Match finds the vendor path of "METHOD /path" among the operations': an exact
// path first, then one with an {id} segment. id is the segment's value.
func Match(ops []*Operation, method, path string) (op *Operation, p *Path, id string) {
	for _, o := range ops {
		for i := range o.Paths {
			if vp := &o.Paths[i]; vp.Method == method && vp.Path == path {
				return o, vp, ""
			}
		}
	}
	for _, o := range ops {
		for i := range o.Paths {
			vp := &o.Paths[i]
			if vp.Method != method || o.ValidID == nil {
				continue
			}
			if v, ok := matchID(vp.Path, path); ok && o.ValidID(v) {
				return o, vp, v
			}
		}
	}
	return nil, nil, ""
}

// matchID matches path against a pattern with one "{id}" segment and
// returns the segment's value.
func matchID(pattern, path string) (string, bool) {
	before, after, ok := strings.Cut(pattern, "{id}")
	if !ok || !strings.HasPrefix(path, before) || !strings.HasSuffix(path[len(before):], after) || len(path) < len(before)+len(after) {
		return "", false
	}
	return path[len(before) : len(path)-len(after)], true
}

// Bounds are the most a request can use, fixed at admission: its hold,
// its share of a tokens-per-minute limit, its wait for a reply and the cap
// on the usage it is charged all follow from them.
type Bounds struct {
	Input, Output int64 // tokens
	// Calls is the number of built-in tool calls with a per-call fee the
	// request is held for.
	Calls int64
	// Seconds is the most input audio, in seconds, a request to a model
	// priced by duration can be billed for.
	Seconds int64
	// Images is the most images a request to a model priced per image can
	// be billed for.
	Images int64
}

// Tokens is the most tokens (input + output) the request can use: what it
// counts towards a tokens-per-minute limit while it runs.
func (b Bounds) Tokens() int64 {
	if b.Output > math.MaxInt64-b.Input {
		return math.MaxInt64
	}
	return b.Input + b.Output
}

// Hold is the most the request's settlement can charge: each side priced
// at the dearest price the request could trigger (pricing.Model.Hold: any
// service tier, any long-context tier, cache writes of either lifetime,
// audio, images' tokens), the tool calls, seconds of audio and images each
// at the dearest price of their unit (pricing.Model.UnitHold).
func (b Bounds) Hold(price *pricing.Model) int64 {
	hold := price.Hold(b.Input, b.Output)
	for _, u := range []struct {
		unit usage.Unit
		n    int64
	}{{usage.Call, b.Calls}, {usage.Second, b.Seconds}, {usage.Image, b.Images}} {
		if u.n > 0 {
			hold += price.UnitHold(u.unit, u.n)
		}
	}
	return hold
}

// DefaultHoldOutput is the output a request without max_tokens is held for
// when the catalogue gives no maximum output for its model.
const DefaultHoldOutput = 128_000

// ToolPromptAllowance covers the input a vendor adds to a request offering
// tools (its tool-use system prompt, a few hundred tokens per request).
const ToolPromptAllowance = 1000

// TextBounds is the hold rule of a request whose body is its input: every
// body byte counts as one token (a token is never shorter than a byte),
// plus ToolPromptAllowance when the request offers tools; the output is
// max_tokens (or the model's maximum output, or DefaultHoldOutput) for each
// of the n choices asked for.
func TextBounds(price *pricing.Model, req format.Request, body []byte) Bounds {
	input := int64(len(body))
	if req.HasTools {
		input += ToolPromptAllowance
	}
	return Bounds{Input: input, Output: OutputBound(price, req)}
}

// OutputBound is max_tokens (or the model's maximum output, or
// DefaultHoldOutput) for each of the choices asked for.
func OutputBound(price *pricing.Model, req format.Request) int64 {
	maxOut := price.MaxOutput
	if maxOut == 0 {
		maxOut = DefaultHoldOutput
	}
	if req.HasMaxTokens {
		maxOut = req.MaxTokens
	}
	choices := max(req.Choices, 1)
	output := max(maxOut, 0)
	if output > math.MaxInt64/choices {
		return math.MaxInt64 // far beyond any balance; Hold caps the cost
	}
	return output * choices
}

// A Registry is the list of the operations the gateway knows.
type Registry []*Operation

// Lookup finds an operation by name.
func (r Registry) Lookup(name string) (*Operation, bool) {
	for _, op := range r {
		if op.Name == name {
			return op, true
		}
	}
	return nil, false
}

// Names lists the operations a vendor API serves, in registry order.
func (r Registry) Names(api string) []string {
	var names []string
	for _, op := range r {
		if op.API == api {
			names = append(names, op.Name)
		}
	}
	return names
}

// Modes are the catalogue modes some operation serves, without repeats:
// the catalogue entries the price tables read.
func (r Registry) Modes() []string {
	var modes []string
	for _, op := range r {
		for _, m := range op.Modes {
			if !slices.Contains(modes, m) {
				modes = append(modes, m)
			}
		}
	}
	return modes
}
