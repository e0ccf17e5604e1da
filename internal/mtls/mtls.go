// Package mtls is the sidecar's mutual TLS for listeners that must leave the
// pod's loopback: the server certificate and the CA that signs the only
// accepted client (Envoy) are read from files, and read again when a file
// changes, so that rotated certificates take effect without a restart.
package mtls

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"
)

// Files name the PEM files of one mTLS server.
type Files struct {
	Cert     string // server certificate chain
	Key      string // its private key
	ClientCA string // CAs whose client certificates are accepted
}

// Set reports whether any file is configured.
func (f Files) Set() bool { return f.Cert != "" || f.Key != "" || f.ClientCA != "" }

// Server is a tls.Config source that reloads its files when they change.
type Server struct {
	files Files
	// checkEvery bounds how often the files' modification times are read.
	checkEvery time.Duration
	now        func() time.Time

	mu      sync.Mutex
	checked time.Time
	stamp   [3]time.Time
	cfg     *tls.Config
}

// NewServer loads the files once (an error here stops the start) and
// returns a reloading source.
func NewServer(f Files) (*Server, error) {
	if f.Cert == "" || f.Key == "" || f.ClientCA == "" {
		return nil, errors.New("mtls: the certificate, key and client CA files are all required")
	}
	s := &Server{files: f, checkEvery: time.Second, now: time.Now}
	if _, err := s.config(); err != nil {
		return nil, err
	}
	return s, nil
}

// TLSConfig returns the configuration for a listener: every handshake gets
// the current files' certificate and client CA, and a client without a
// certificate signed by that CA is refused.
func (s *Server) TLSConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return s.config()
		},
	}
}

// config returns the current configuration, reloading it when a file's
// modification time has changed. A reload that fails keeps the previous
// configuration, so that a half-written file does not stop the listener.
func (s *Server) config() (*tls.Config, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if s.cfg != nil && now.Sub(s.checked) < s.checkEvery {
		return s.cfg, nil
	}
	s.checked = now
	var stamp [3]time.Time
	for i, p := range []string{s.files.Cert, s.files.Key, s.files.ClientCA} {
		fi, err := os.Stat(p)
		if err != nil {
			if s.cfg != nil {
				return s.cfg, nil
			}
			return nil, fmt.Errorf("mtls: %w", err)
		}
		stamp[i] = fi.ModTime()
	}
	if s.cfg != nil && stamp == s.stamp {
		return s.cfg, nil
	}
	cfg, err := load(s.files)
	if err != nil {
		if s.cfg != nil {
			return s.cfg, nil
		}
		return nil, err
	}
	s.cfg, s.stamp = cfg, stamp
	return cfg, nil
}

func load(f Files) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		return nil, fmt.Errorf("mtls: server certificate: %w", err)
	}
	pem, err := os.ReadFile(f.ClientCA)
	if err != nil {
		return nil, fmt.Errorf("mtls: client CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("mtls: client CA %s: no PEM certificate", f.ClientCA)
	}
	return &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{cert},
		ClientCAs:    pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
		NextProtos:   []string{"h2", "http/1.1"},
	}, nil
}
