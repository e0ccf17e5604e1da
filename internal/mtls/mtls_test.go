package mtls

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"os"
	"testing"
	"time"

	"github.com/modelgateway/gateway/internal/mtls/mtlstest"
)

// dial makes a TLS connection with the given client certificate (none when
// cert is empty) trusting ca, and reports whether the handshake succeeded.
func dial(t *testing.T, addr, ca, cert, key string) error {
	t.Helper()
	pem, err := os.ReadFile(ca)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	cfg := &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"}
	if cert != "" {
		c, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Certificates = []tls.Certificate{c}
	}
	conn, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		return err
	}
	defer conn.Close()
	// TLS 1.3 reports a refused client certificate on the first read.
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err = conn.Read(make([]byte, 1))
	if err == io.EOF {
		return nil
	}
	return err
}

func TestClientCertificateRequiredAndFilesReloaded(t *testing.T) {
	dir := t.TempDir()
	a := mtlstest.Write(t, dir, "a")
	b := mtlstest.Write(t, dir, "b")
	files := Files{Cert: dir + "/server.pem", Key: dir + "/server-key.pem", ClientCA: dir + "/ca.pem"}
	install := func(p mtlstest.PKI) {
		for src, dst := range map[string]string{p.ServerCert: files.Cert, p.ServerKey: files.Key, p.CA: files.ClientCA} {
			data, err := os.ReadFile(src)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(dst+".tmp", data, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(dst+".tmp", dst); err != nil {
				t.Fatal(err)
			}
		}
	}
	install(a)
	srv, err := NewServer(files)
	if err != nil {
		t.Fatal(err)
	}
	clock := time.Now()
	srv.now = func() time.Time { return clock }
	l, err := tls.Listen("tcp", "127.0.0.1:0", srv.TLSConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() { c.(*tls.Conn).Handshake(); c.Close() }()
		}
	}()
	addr := l.Addr().String()
	if err := dial(t, addr, a.CA, a.ClientCert, a.ClientKey); err != nil {
		t.Fatalf("client of CA a: %v", err)
	}
	if err := dial(t, addr, a.CA, "", ""); err == nil {
		t.Fatal("a client without a certificate was accepted")
	}
	if err := dial(t, addr, a.CA, b.ClientCert, b.ClientKey); err == nil {
		t.Fatal("a client of another CA was accepted")
	}
	// Rotate to PKI b: after the check interval, b's client is accepted and
	// a's is not.
	install(b)
	for _, f := range []string{files.Cert, files.Key, files.ClientCA} {
		later := time.Now().Add(time.Minute)
		os.Chtimes(f, later, later)
	}
	clock = clock.Add(2 * time.Second)
	if err := dial(t, addr, b.CA, b.ClientCert, b.ClientKey); err != nil {
		t.Fatalf("after rotation, client of CA b: %v", err)
	}
	if err := dial(t, addr, b.CA, a.ClientCert, a.ClientKey); err == nil {
		t.Fatal("after rotation, a client of the old CA was accepted")
	}
	// A broken file keeps the last good configuration.
	os.WriteFile(files.Cert, []byte("garbage"), 0o600)
	clock = clock.Add(2 * time.Second)
	if err := dial(t, addr, b.CA, b.ClientCert, b.ClientKey); err != nil {
		t.Fatalf("with a broken file: %v", err)
	}
}

func TestNewServerNeedsEveryFile(t *testing.T) {
	if _, err := NewServer(Files{Cert: "x"}); err == nil {
		t.Fatal("accepted a partial configuration")
	}
}
