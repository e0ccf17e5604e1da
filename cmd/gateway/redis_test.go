package main

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/modelgateway/gateway/internal/mtls/mtlstest"
	"github.com/modelgateway/gateway/internal/redistest"
)

// A real redis-server (test/integration's) with TLS only trusted through a
// throwaway CA, and an ACL user with a password: rediss:// with ca_file and
// the user works, a client without the CA or with a wrong password does not.
func TestRedisOverTLSWithAuth(t *testing.T) {
	addr, caFile := redistest.ProvidedTLS(t)
	ctx := context.Background()

	good, err := newRedis("rediss://gateway:s3cret@"+addr+"/0?ca_file="+caFile, redisOptions{Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer good.Close()
	if err := good.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("rediss with CA and user: %v", err)
	}
	if v, _ := good.Get(ctx, "k").Result(); v != "v" {
		t.Fatalf("get over TLS = %q", v)
	}

	// The password may come from outside the URL (REDIS_PASSWORD_FILE).
	viaOpt, err := newRedis("rediss://gateway@"+addr+"?ca_file="+caFile, redisOptions{Timeout: 2 * time.Second, Password: "s3cret"})
	if err != nil {
		t.Fatal(err)
	}
	defer viaOpt.Close()
	if err := viaOpt.Ping(ctx).Err(); err != nil {
		t.Fatalf("password from options: %v", err)
	}

	untrusted, _ := newRedis("rediss://gateway:s3cret@"+addr, redisOptions{Timeout: 2 * time.Second})
	defer untrusted.Close()
	if err := untrusted.Ping(ctx).Err(); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("a server signed by an unknown CA was accepted: %v", err)
	}
	wrongPW, _ := newRedis("rediss://gateway:nope@"+addr+"?ca_file="+caFile, redisOptions{Timeout: 2 * time.Second})
	defer wrongPW.Close()
	if err := wrongPW.Ping(ctx).Err(); err == nil {
		t.Fatal("a wrong password was accepted")
	}
	plain, _ := newRedis("redis://gateway:s3cret@"+addr, redisOptions{Timeout: 500 * time.Millisecond})
	defer plain.Close()
	if err := plain.Ping(ctx).Err(); err == nil {
		t.Fatal("plaintext to the TLS port worked")
	}
}

// The cluster and sentinel schemes take TLS and credentials too.
func TestRedisURLSchemes(t *testing.T) {
	caFile := mtlstest.Write(t, t.TempDir(), "redis").CA
	for _, tc := range []struct {
		url     string
		wantErr string
	}{
		{"rediss+cluster://u:p@a:1,b:2?ca_file=" + caFile, ""},
		{"rediss+sentinel://u:p@a:1,b:2/mymaster?ca_file=" + caFile + "&server_name=redis.internal", ""},
		{"redis+sentinel://a:1", "master name"},
		{"redis+cluster://a:1?ca_file=" + caFile, "rediss"},
		{"rediss://a:1?ca_file=/nonexistent", "ca_file"},
		{"memcached://a:1", "scheme"},
	} {
		c, err := newRedis(tc.url, redisOptions{})
		if tc.wantErr == "" {
			if err != nil {
				t.Errorf("%s: %v", tc.url, err)
				continue
			}
			c.Close()
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("%s: err %v, want %q", tc.url, err, tc.wantErr)
		}
		if err != nil && strings.Contains(err.Error(), ":p@") {
			t.Errorf("%s: password in the error: %v", tc.url, err)
		}
	}
}

// A store that accepts connections and never answers fails a command within
// the timeout, even when the caller's context has no deadline.
func TestHungRedisFailsFast(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
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
			defer c.Close() // held open, never answered
		}
	}()
	for _, url := range []string{"redis://" + l.Addr().String(), "redis+cluster://" + l.Addr().String()} {
		c, err := newRedis(url, redisOptions{Timeout: 300 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		err = c.Ping(context.Background()).Err()
		took := time.Since(start)
		c.Close()
		if err == nil || took > time.Second {
			t.Fatalf("%s: ping of a hung store: err %v after %v; want an error within 1s", url, err, took)
		}
		t.Logf("%s: hung store failed the ping after %v: %v", url, took.Round(time.Millisecond), err)
	}
}
