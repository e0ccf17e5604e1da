// Package format defines what the processor needs from a vendor wire format:
// reading the few request fields that admission depends on, metering the
// vendor's reply, and writing errors the vendor's own SDKs understand.
//
// Each wire format lives in its own package named for it (messages,
// chatcompletions) and implements Format; a format's errors are one table
// from ErrorKind to the vendor's error type, next to its ErrorBody.
package format

import (
	"net/http"
	"slices"
	"strconv"

	"github.com/modelgateway/gateway/extproc/jsonscan"
	"github.com/modelgateway/gateway/internal/usage"
)

// Request holds the top-level request fields the gateway reads.
type Request struct {
	Model        string
	MaxTokens    int64 // zero when HasMaxTokens is false
	HasMaxTokens bool
	Stream       bool
	// IncludeUsage reports stream_options.include_usage (the chat-completions format only): what
	// the client asked for, whatever Edit asks the vendor.
	IncludeUsage bool
	// WebSearch reports web_search_options (chat completions only): the
	// request runs one web search, billed per query.
	WebSearch bool
	// Edit is the one change made to the body on its way to the vendor; the
	// zero Edit forwards it byte for byte. The chat-completions format asks
	// the vendor for usage on every stream, and its meter keeps from the
	// client what it did not ask for (see Rewriter).
	Edit Edit
	// Choices is the number of replies asked for (chat completions' n); the
	// vendor bills the output of each. Zero means one.
	Choices int64
	// HasTools reports a non-empty tools list: the vendor then adds its
	// tool-use system prompt to the billed input.
	HasTools bool
	// Session is the body's session marker, "" without one: the
	// conversation whose requests a pool of vendor keys keeps on one key
	// (prompt_cache_key, else metadata.user_id or user, as the API has
	// them). Read in the same pass as the rest.
	Session string

	// Vendor-side state, for operations whose vendor keeps what it
	// produces (the responses operation).

	// Refs are the stored objects the request names: each must be the
	// requesting account's, or the request is refused (404, Ref.NotFound)
	// before anything reaches the vendor. Objects the gateway can never
	// bind (files, vector stores, prompts...) are not listed here: the
	// format refuses the request itself.
	Refs []Ref
	// Background asks the vendor to run the request after answering: it
	// settles when the vendor's object reaches a final state.
	Background bool
	// NoStore is "store": false: the vendor keeps nothing to bind.
	NoStore bool

	// Own holds the operation's own fields, read by its hold rule
	// (operation.Operation.Bounds); nil for most.
	Own any
}

// A Ref names one stored object the vendor keeps: a response, or an item
// of one.
type Ref struct {
	Kind RefKind
	ID   string
}

// RefKind is the kind of a stored object. Both kinds are bound in the
// same records (one per id): ids of different kinds never collide.
type RefKind uint8

const (
	// StoredResponse is a response (previous_response_id).
	StoredResponse RefKind = iota
	// StoredItem is an item of a stored response (an input item naming
	// it by id).
	StoredItem
)

// NotFound is the vendor's words for a ref that is not the account's.
func (r Ref) NotFound() string {
	noun := "Response"
	if r.Kind == StoredItem {
		noun = "Item"
	}
	return noun + " with id " + strconv.Quote(r.ID) + " not found."
}

// An Edit replaces Cut bytes at offset At of a request body with Insert.
type Edit struct {
	At, Cut int
	Insert  string
}

// IsZero reports whether the edit leaves a body unchanged.
func (e Edit) IsZero() bool { return e.Cut == 0 && e.Insert == "" }

// Apply returns a new slice holding body with the edit made; body is not
// changed.
func (e Edit) Apply(body []byte) []byte {
	out := make([]byte, 0, len(body)-e.Cut+len(e.Insert))
	out = append(out, body[:e.At]...)
	out = append(out, e.Insert...)
	return append(out, body[e.At+e.Cut:]...)
}

// NonEmptyArray reports whether raw JSON is an array with an element.
func NonEmptyArray(raw []byte) bool {
	for i := 1; i < len(raw)-1; i++ {
		switch raw[i] {
		case ' ', '\t', '\n', '\r':
			continue
		}
		return raw[0] == '['
	}
	return false
}

// Meter observes one response body and reports its usage.
type Meter interface {
	// Write feeds the next chunk of the response body. It must not retain p.
	Write(p []byte)
	// Usage reports what to bill. complete is false when the body did not end
	// normally (client gone, upstream reset); the meter then estimates what it
	// did not observe and marks the result estimated.
	Usage(complete bool) usage.Report
}

// A Rewriter is a meter that also changes the reply on its way to the
// client, to take out what the gateway asked the vendor for and the client
// did not. NewMeter returns one only when there is something to take out.
type Rewriter interface {
	Meter
	// Rewrite feeds the next chunk of the body, like Write, and returns what
	// the client receives in its place; end marks the last chunk. changed
	// is false when that is p itself. out may alias p or a buffer of the
	// rewriter and is valid until the next call.
	Rewrite(p []byte, end bool) (out []byte, changed bool)
}

// A Stored meter reads a reply that names an object the vendor keeps (a
// stored response): the processor binds the id to the account and, for a
// background request, settles only once the object is final.
type Stored interface {
	// Response returns the id of the object the reply names ("" until it
	// has been seen) and whether the reply shows it in a final state
	// (completed, incomplete, failed or cancelled), whose usage is the
	// whole of what it will bill.
	Response() (id string, final bool)
}

// A StoredItems meter also reads the ids of the items of the stored object
// its reply names (a response's output items: messages, function calls,
// reasoning), which later requests may name by id alone: the processor
// binds them to the account with the object.
type StoredItems interface {
	// Items returns the item ids the reply has shown so far, each a valid
	// id (see MaxItems for the bound); the slice is the meter's, valid
	// until its next Write.
	Items() []string
}

// MaxItems bounds the item ids a StoredItems meter keeps of one reply.
const MaxItems = 256

// Format is one vendor wire format.
type Format interface {
	// ParseRequest reads the top-level fields of a request body without
	// decoding the whole document; contentType is the request's (a
	// multipart body needs its boundary). A body the vendor would reject as
	// malformed yields an *Error of kind InvalidRequest.
	ParseRequest(body []byte, contentType string) (Request, error)
	// NewMeter returns a meter for a 2xx reply with the given content type.
	// body is the request body, kept only for estimates when the reply carries
	// no usage.
	NewMeter(req Request, body []byte, contentType string) Meter
	// ErrorBody renders an error in the vendor's JSON error shape.
	ErrorBody(e *Error) []byte
}

// Error is a refusal the gateway answers itself, in the vendor's error
// format. Its kind carries the HTTP status.
type Error struct {
	Kind    ErrorKind
	Message string
	Param   string // the offending request field, when there is one
}

func (e *Error) Error() string { return e.Message }

// Status is the HTTP status of the refusal.
func (e *Error) Status() int { return e.Kind.Status() }

// Invalid is a 400 about one request field; param may be empty.
func Invalid(param, message string) *Error {
	return &Error{Kind: InvalidRequest, Param: param, Message: message}
}

// ErrorKind classifies the gateway's refusals independently of the wire
// format. Each wire format maps every kind to its vendor's error type in one
// table indexed by kind (see messages.errorTypes).
type ErrorKind int

const (
	InvalidRequest   ErrorKind = iota
	ModelNotFound              // a model not on this gateway, with the vendor's model code where it has one
	Unauthenticated            // no usable credential
	BillingExhausted           // the balance cannot cover the request
	PermissionDenied           // the credential may not do this
	NotFound                   // no such path
	TooLarge                   // the request body is over the limit
	RateLimited                // the account's request rate
	DailyLimit                 // the account's daily spend limit
	Unavailable                // the store cannot be asked

	// NumErrorKinds is the number of kinds: the length of a table indexed by kind.
	NumErrorKinds = iota
)

// errorKinds is what each kind means whatever the format: its HTTP status and
// its reason label in gateway_rejections_total.
var errorKinds = [NumErrorKinds]struct {
	status int
	reason string
}{
	InvalidRequest:   {http.StatusBadRequest, "invalid_request"},
	ModelNotFound:    {http.StatusBadRequest, "invalid_request"}, // the vendors' own 404 would read as "no such endpoint"
	Unauthenticated:  {http.StatusUnauthorized, "unauthenticated"},
	BillingExhausted: {http.StatusPaymentRequired, "balance"},
	PermissionDenied: {http.StatusForbidden, "forbidden"},
	NotFound:         {http.StatusNotFound, "not_found"},
	TooLarge:         {http.StatusRequestEntityTooLarge, "too_large"},
	RateLimited:      {http.StatusTooManyRequests, "rate_limit"},
	DailyLimit:       {http.StatusTooManyRequests, "daily_limit"},
	Unavailable:      {http.StatusServiceUnavailable, "unavailable"},
}

// Status is the HTTP status for an error kind.
func (k ErrorKind) Status() int { return errorKinds[k].status }

// Reason is the kind's value of the rejections metric's reason label.
func (k ErrorKind) Reason() string { return errorKinds[k].reason }

// Reasons returns every value of the reason label, in kind order without repeats.
func Reasons() []string {
	var rs []string
	for _, k := range errorKinds {
		if !slices.Contains(rs, k.reason) {
			rs = append(rs, k.reason)
		}
	}
	return rs
}

// SessionText is a session marker's text: a string's, "" for any other
// value (a marker is only ever a string).
func SessionText(v jsonscan.Value) string {
	if v.Kind != jsonscan.String {
		return ""
	}
	return v.Text()
}
