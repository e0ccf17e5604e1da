package docs

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/modelgateway/gateway/extproc/wire"
	"github.com/modelgateway/gateway/internal/config"
)

// The bounds security.md lists are the defaults the gateway enforces.
func TestSecurityBoundsAreTheDefaults(t *testing.T) {
	b, err := os.ReadFile("security.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(b), "\n## Bounds\n")
	if !ok {
		t.Fatal("security.md has no Bounds section")
	}
	c, err := config.Load("../gateway.yaml")
	if err != nil {
		t.Fatal(err)
	}
	mib := func(n int64) string { return strconv.FormatInt(n>>20, 10) + " MiB" }
	for row, want := range map[string]string{
		"| request body |":                      mib(c.Limits.MaxRequestBytes),
		"| Envoy's read of one client":          mib(config.ReadBufferBytes),
		"| pings and refused messages":          strconv.Itoa(config.DefaultSocketPingsPerSecond) + " a second",
		"| sockets per key":                     strconv.Itoa(config.DefaultSocketsPerKey),
		"| socket idle time":                    strconv.Itoa(int(config.DefaultSocketIdle/time.Minute)) + " minutes",
		"| request headers |":                   strconv.Itoa(c.Envoy.MaxRequestHeadersKB) + " KB",
		"| time to send the headers":            strconv.Itoa(int(c.Envoy.RequestHeadersTimeout.D()/time.Second)) + " s",
		"| waiting room":                        strconv.Itoa(config.DefaultConcurrencyWaiters) + " per sidecar",
		"| a refusal remembered at the headers": strconv.Itoa(int(config.RefusalMemory/time.Second)) + " s",
		"| a key's standing":                    strconv.Itoa(int(config.DefaultKeyCacheTTL/time.Second)) + " s old",
		"| what an ended request leaves": strconv.Itoa(wire.KeptBodyBytes>>10) + " KB of body, " + strconv.Itoa(wire.KeptHeaderValueBytes>>10) +
			" KB of header values and " + strconv.Itoa(wire.KeptHeaders) + " headers",
	} {
		i := strings.Index(table, row)
		if i < 0 {
			t.Errorf("security.md's bounds have no row %q", row)
			continue
		}
		line, _, _ := strings.Cut(table[i:], "\n")
		if !strings.Contains(line, want) {
			t.Errorf("security.md: %s, want %s", line, want)
		}
	}
}
