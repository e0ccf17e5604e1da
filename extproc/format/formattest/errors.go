package formattest

import (
	"slices"
	"strings"
	"testing"

	"github.com/modelgateway/gateway/extproc/format"
)

// CheckErrorBodies renders every error kind with a message that needs
// escaping and fails t unless read, the format's own decoding of its error
// JSON, gets the message back and a type among documented, the vendor's
// documented error types. It returns the type of each kind for the caller's
// own checks.
func CheckErrorBodies(t *testing.T, f format.Format, documented []string, read func(body []byte) (typ, message string, err error)) [format.NumErrorKinds]string {
	t.Helper()
	const msg = "model \"x\" \\ not\nallowed \u2028 \x01 \xff <tag>"
	var types [format.NumErrorKinds]string
	for k := range format.ErrorKind(format.NumErrorKinds) {
		b := f.ErrorBody(&format.Error{Kind: k, Message: msg})
		typ, got, err := read(b)
		if err != nil {
			t.Fatalf("kind %d: %s: %v", k, b, err)
		}
		if got != strings.ToValidUTF8(msg, "\uFFFD") || !slices.Contains(documented, typ) {
			t.Errorf("kind %d: type %q is not documented or the message did not survive: %s", k, typ, b)
		}
		types[k] = typ
	}
	return types
}
