package redistest

import (
	"net"
	"strconv"
	"testing"

	"github.com/modelgateway/gateway/internal/mtls/mtlstest"
)

// TLSServer is a redis-server that also listens with TLS, its certificate
// signed by a CA made for the test.
type TLSServer struct {
	*Server
	TLSAddr string // host:port of the TLS listener
	CAFile  string // PEM of the CA that signed the server's certificate
}

// NewTLSServer starts a redis-server with a TLS port beside its plaintext
// one (which the readiness check uses); extra arguments are added, such as
// "--user", NAME, "on", ">PASSWORD", "~*", "&*", "+@all".
func NewTLSServer(tb testing.TB, extra ...string) *TLSServer {
	tb.Helper()
	pki := mtlstest.Write(tb, tb.TempDir(), "redis")
	port, err := freePort()
	if err != nil {
		tb.Fatalf("redistest: %v", err)
	}
	args := append([]string{
		"--tls-port", strconv.Itoa(port),
		"--tls-cert-file", pki.ServerCert,
		"--tls-key-file", pki.ServerKey,
		"--tls-ca-cert-file", pki.CA,
		"--tls-auth-clients", "no",
	}, extra...)
	s := NewServerWith(tb, args...)
	return &TLSServer{Server: s, TLSAddr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), CAFile: pki.CA}
}
