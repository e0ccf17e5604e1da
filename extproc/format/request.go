package format

import (
	"errors"
	"strconv"
	"strings"

	"github.com/modelgateway/gateway/extproc/jsonscan"
)

// MaxTokensLimit is the largest token limit a request may set: the vendors'
// fields are 32-bit integers, and admission multiplies them by prices.
const MaxTokensLimit = 1<<31 - 1

// RequestCheck collects what a ParseRequest finds wrong with a request's
// fields while it scans the body. Only the first field error is kept, and
// it is reported only if the body is otherwise valid JSON (see Err). The
// zero value is ready to use.
type RequestCheck struct {
	fieldErr error
}

// Fail records that param is invalid, msg saying why, unless a field error
// was recorded already.
func (c *RequestCheck) Fail(param, msg string) {
	if c.fieldErr == nil {
		c.fieldErr = Invalid(param, param+": "+msg)
	}
}

// Failed reports whether a field error was recorded.
func (c *RequestCheck) Failed() bool { return c.fieldErr != nil }

// Model reads the model field, which must be a non-empty string.
func (c *RequestCheck) Model(v jsonscan.Value) (string, bool) {
	if v.Kind != jsonscan.String || len(v.Raw) == 2 {
		c.Fail("model", "must be a non-empty string")
		return "", false
	}
	return v.Text(), true
}

// TokenLimit reads a token limit, which must be an integer from 1 to
// MaxTokensLimit. An integral value written as 1e3 or 100.0 is accepted, as
// the vendors' parsers accept it.
func (c *RequestCheck) TokenLimit(param string, v jsonscan.Value) (int64, bool) {
	n, ok := v.Int()
	if !ok || n <= 0 || n > MaxTokensLimit {
		c.Fail(param, "must be a positive integer no greater than 2147483647")
		return 0, false
	}
	return n, true
}

// Bool reads a boolean field; null means false.
func (c *RequestCheck) Bool(param string, v jsonscan.Value) bool {
	b, ok := v.Bool()
	if !ok && v.Kind != jsonscan.Null {
		c.Fail(param, "must be a boolean")
	}
	return b
}

// Err returns the error of a parse of body whose scan returned scanErr, in
// the order a client fixes them: malformed JSON (a repeated key included),
// then a body that is not a JSON object, then the first field error.
func (c *RequestCheck) Err(body []byte, scanErr error) error {
	switch {
	case scanErr != nil:
		return scanError(scanErr)
	case jsonscan.TopLevel(body) != jsonscan.Object:
		return Invalid("", "request body must be a JSON object")
	}
	return c.fieldErr
}

// scanError turns a scanner error into a client error. It is apart from Err
// because errors.As moves its target to the heap: a valid body must not pay
// for that.
func scanError(err error) error {
	var dup *jsonscan.DuplicateKeyError
	if errors.As(err, &dup) {
		return Invalid(dup.Path, dup.Path+": key appears more than once in the request body")
	}
	var folded *jsonscan.FoldedKeyError
	if errors.As(err, &folded) {
		return FoldedKey(folded.Path, folded.Key)
	}
	return Invalid("", "request body is not valid JSON: "+err.Error())
}

// FoldedKey is the refusal of a key (or a form's part name) that is not
// the field at path but equals its last step under case folding: parsers that match keys
// case-insensitively (Go's encoding/json among them) would read it as the
// field, and serve what the gateway did not price.
func FoldedKey(path, key string) *Error {
	last := path[strings.LastIndexByte(path, '.')+1:]
	return Invalid(path, path+": the field name "+strconv.QuoteToASCII(key)+" differs from "+strconv.Quote(last)+
		" only in case; field names are case-sensitive: send "+strconv.Quote(last)+" as spelled")
}

// Missing is the error for a required field the request lacks.
func Missing(param string) *Error {
	return Invalid(param, param+": field required")
}

// NotStored is the refusal of a request naming, by id, an object the
// vendor keeps that the gateway never binds to an account (a file, a
// vector store, a stored prompt...): no account can own one, so it is
// answered as the vendor answers an id it does not know, 404 "<noun> with
// id "<id>" not found.", followed by instead, what to send in its place.
func NotStored(param, noun, id, instead string) *Error {
	return &Error{Kind: NotFound, Param: param, Message: noun + " with id " + strconv.Quote(id) + " not found. " + instead}
}
