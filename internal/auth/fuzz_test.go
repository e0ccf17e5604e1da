package auth

import (
	"strings"
	"testing"

	"github.com/modelgateway/gateway/internal/account"
)

// FuzzParse: any header values give either a well-formed secret that came
// from one of the headers, or an error; never a panic.
func FuzzParse(f *testing.F) {
	f.Add("cr_abcdefghijklmnop", "")
	f.Add("", "Bearer ro_abcdefghijklmnop")
	f.Add("cr_abcdefghijklmnop", "Bearer cr_abcdefghijklmnop")
	f.Add("cr_a b", "Basic x")
	f.Add("\xff\xfe", "bearer \x00")
	f.Fuzz(func(t *testing.T, xAPIKey, authorization string) {
		s, err := Parse(xAPIKey, authorization)
		if err != nil {
			if s != "" {
				t.Fatalf("error %v with secret %q", err, s)
			}
			return
		}
		if len(s) < 8 || len(s) > 128 || strings.ContainsAny(s, " \t\r\n") {
			t.Fatalf("malformed secret accepted: %q", s)
		}
		if !strings.Contains(xAPIKey, s) && !strings.Contains(authorization, s) {
			t.Fatalf("secret %q came from neither header", s)
		}
		if Kind(s) == "" && (strings.HasPrefix(s, account.ModelKey.Prefix()) || strings.HasPrefix(s, account.ReadOnlyToken.Prefix())) {
			t.Fatalf("kind of %q not recognised", s)
		}
	})
}
