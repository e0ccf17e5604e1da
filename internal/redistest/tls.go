package redistest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
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
	dir := tb.TempDir()
	ca, caKey := writeCert(tb, dir, "ca", nil, nil)
	writeCert(tb, dir, "server", ca, caKey)
	port, err := freePort()
	if err != nil {
		tb.Fatalf("redistest: %v", err)
	}
	args := append([]string{
		"--tls-port", strconv.Itoa(port),
		"--tls-cert-file", filepath.Join(dir, "server.crt"),
		"--tls-key-file", filepath.Join(dir, "server.key"),
		"--tls-ca-cert-file", filepath.Join(dir, "ca.crt"),
		"--tls-auth-clients", "no",
	}, extra...)
	s := NewServerWith(tb, args...)
	return &TLSServer{Server: s, TLSAddr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), CAFile: filepath.Join(dir, "ca.crt")}
}

// writeCert writes NAME.crt and NAME.key into dir: a CA when ca is nil,
// else a server certificate for localhost and 127.0.0.1 signed by ca.
func writeCert(tb testing.TB, dir, name string, ca *x509.Certificate, caKey *ecdsa.PrivateKey) (*x509.Certificate, *ecdsa.PrivateKey) {
	tb.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
	}
	if ca == nil {
		tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
		tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature
		ca, caKey = tmpl, key
	} else {
		tmpl.DNSNames, tmpl.IPAddresses = []string{"localhost"}, []net.IP{net.ParseIP("127.0.0.1")}
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		tb.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		tb.Fatal(err)
	}
	for file, block := range map[string]*pem.Block{
		name + ".crt": {Type: "CERTIFICATE", Bytes: der},
		name + ".key": {Type: "EC PRIVATE KEY", Bytes: keyDER},
	} {
		if err := os.WriteFile(filepath.Join(dir, file), pem.EncodeToMemory(block), 0o600); err != nil {
			tb.Fatal(err)
		}
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		tb.Fatal(err)
	}
	return cert, key
}
