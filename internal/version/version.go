// Package version names the build: the release it was cut from (set by the
// Makefile and the Dockerfile from CHANGELOG.md's newest release heading) and
// the commit the toolchain recorded.
package version

import "runtime/debug"

// Release is the semantic version of the release, set at link time with
// -ldflags "-X github.com/modelgateway/gateway/internal/version.Release=0.2.0".
// A plain `go build` leaves it "dev".
var Release = "dev"

// Revision is the commit the binary was built from, "unknown" when the
// toolchain recorded none (a build outside a checkout), with "+modified"
// when the checkout had uncommitted changes.
func Revision() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	rev, dirty := "unknown", false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if dirty && rev != "unknown" {
		rev += "+modified"
	}
	return rev
}

// String is how the binaries print themselves: "0.2.0 3f2c1ab…".
func String() string { return Release + " " + Revision() }
