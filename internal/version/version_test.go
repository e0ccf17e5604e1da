package version

import (
	"strings"
	"testing"
)

func TestStringNamesReleaseAndRevision(t *testing.T) {
	old := Release
	t.Cleanup(func() { Release = old })
	Release = "9.8.7"
	s := String()
	if !strings.HasPrefix(s, "9.8.7 ") || !strings.HasSuffix(s, Revision()) {
		t.Fatalf("String() = %q: want the release, a space and the revision %q", s, Revision())
	}
}
