// Package mtlstest writes a throwaway PKI for tests: a CA, a server
// certificate for 127.0.0.1 and localhost, and a client certificate.
package mtlstest

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
	"testing"
	"time"
)

// PKI holds the paths of the files written.
type PKI struct {
	CA                    string
	ServerCert, ServerKey string
	ClientCert, ClientKey string
}

// Write writes a fresh PKI under dir; name makes distinct PKIs (and
// distinct CAs) in one directory.
func Write(tb testing.TB, dir, name string) PKI {
	tb.Helper()
	caKey := newKey(tb)
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name + " test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		tb.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	p := PKI{CA: filepath.Join(dir, name+"-ca.pem")}
	writePEM(tb, p.CA, "CERTIFICATE", caDER)
	issue := func(serial int64, cn string, usage x509.ExtKeyUsage, server bool) (string, string) {
		k := newKey(tb)
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial),
			Subject:      pkix.Name{CommonName: cn},
			NotBefore:    time.Now().Add(-time.Hour),
			NotAfter:     time.Now().Add(24 * time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		}
		if server {
			tmpl.DNSNames = []string{"localhost"}
			tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &k.PublicKey, caKey)
		if err != nil {
			tb.Fatal(err)
		}
		kb, err := x509.MarshalPKCS8PrivateKey(k)
		if err != nil {
			tb.Fatal(err)
		}
		cert, key := filepath.Join(dir, name+"-"+cn+".pem"), filepath.Join(dir, name+"-"+cn+"-key.pem")
		writePEM(tb, cert, "CERTIFICATE", der)
		writePEM(tb, key, "PRIVATE KEY", kb)
		return cert, key
	}
	p.ServerCert, p.ServerKey = issue(2, "server", x509.ExtKeyUsageServerAuth, true)
	p.ClientCert, p.ClientKey = issue(3, "client", x509.ExtKeyUsageClientAuth, false)
	return p
}

func newKey(tb testing.TB) *ecdsa.PrivateKey {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	return k
}

func writePEM(tb testing.TB, path, typ string, der []byte) {
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		tb.Fatal(err)
	}
}
