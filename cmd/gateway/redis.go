package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// redisOptions are the client settings that do not come from the URL.
type redisOptions struct {
	// Timeout bounds dialing, each read and write, waiting for a pooled
	// connection, and a whole command whose context has no deadline: a
	// store that accepts and never answers fails the request within it
	// (503 with retry-after) instead of holding it.
	Timeout time.Duration
	// Password, when not empty, replaces the URL's (REDIS_PASSWORD or the
	// file named by REDIS_PASSWORD_FILE).
	Password string
}

// newRedis connects to REDIS_URL-style addresses:
//
//	redis://[user:password@]host:port[/db]              standalone
//	redis+cluster://host:port,host:port                 Redis Cluster
//	redis+sentinel://host:port,host:port/master         Sentinel-managed primary
//
// The schemes rediss, rediss+cluster and rediss+sentinel use TLS (to the
// Sentinels too). Query parameters: ca_file (PEM bundle to trust instead of
// the system's), server_name (certificate name when it differs from the
// host), sentinel_password (when the Sentinels' differs from the data
// nodes'); for standalone URLs the go-redis options too.
func newRedis(rawURL string, o redisOptions) (redis.UniversalClient, error) {
	if o.Timeout <= 0 {
		o.Timeout = 500 * time.Millisecond
	}
	scheme, rest, ok := strings.Cut(rawURL, "://")
	if !ok {
		return nil, fmt.Errorf("redis url %q: missing scheme", redactURL(rawURL))
	}
	u, err := url.Parse("redis://" + rest)
	if err != nil {
		return nil, fmt.Errorf("redis url %q: %w", redactURL(rawURL), err)
	}
	q := u.Query()
	caFile, serverName, sentinelPW := q.Get("ca_file"), q.Get("server_name"), q.Get("sentinel_password")
	for _, k := range []string{"ca_file", "server_name", "sentinel_password"} {
		q.Del(k)
	}
	u.RawQuery = q.Encode()

	kind, useTLS := strings.TrimPrefix(scheme, "rediss"), strings.HasPrefix(scheme, "rediss")
	if !useTLS {
		kind = strings.TrimPrefix(scheme, "redis")
	}
	var tlsConf *tls.Config
	if useTLS {
		if tlsConf, err = redisTLS(caFile, serverName, u.Hostname()); err != nil {
			return nil, fmt.Errorf("redis url %q: %w", redactURL(rawURL), err)
		}
	} else if caFile != "" || serverName != "" {
		return nil, fmt.Errorf("redis url %q: ca_file and server_name need a rediss scheme", redactURL(rawURL))
	}

	var c redis.UniversalClient
	switch kind {
	case "":
		opts, err := redis.ParseURL(u.String())
		if err != nil {
			return nil, fmt.Errorf("redis url %q: %w", redactURL(rawURL), err)
		}
		opts.TLSConfig = tlsConf
		if o.Password != "" {
			opts.Password = o.Password
		}
		applyTimeouts(&opts.DialTimeout, &opts.ReadTimeout, &opts.WriteTimeout, &opts.PoolTimeout, o.Timeout)
		opts.MaxRetries = 1
		// One dial per attempt: the client's default (5 dials 100 ms apart,
		// per retry) made a refused connection take about a second to
		// fail, a second in which a sidecar with leases kept admitting
		// from them and every other request waited for its 503.
		opts.DialerRetries = 1
		opts.ContextTimeoutEnabled = true
		c = redis.NewClient(opts)
	case "+cluster", "+sentinel":
		uo := &redis.UniversalOptions{Addrs: strings.Split(u.Host, ","), TLSConfig: tlsConf}
		if u.User != nil {
			uo.Username = u.User.Username()
			uo.Password, _ = u.User.Password()
		}
		if o.Password != "" {
			uo.Password = o.Password
		}
		applyTimeouts(&uo.DialTimeout, &uo.ReadTimeout, &uo.WriteTimeout, &uo.PoolTimeout, o.Timeout)
		uo.MaxRetries = 1
		uo.DialerRetries = 1 // as above
		uo.ContextTimeoutEnabled = true
		if kind == "+cluster" {
			// One redirect after a failover, not the default 3.
			uo.MaxRedirects = 2
			co := uo.Cluster()
			co.ClusterStateReloadInterval = clusterReloadInterval
			cc := redis.NewClusterClient(co)
			cc.AddHook(newReloadHook(cc))
			c = cc
			break
		}
		uo.MasterName = strings.Trim(u.Path, "/")
		if uo.MasterName == "" {
			return nil, fmt.Errorf("redis url %q: sentinel needs a master name as the path", redactURL(rawURL))
		}
		uo.SentinelPassword = sentinelPW
		if uo.SentinelPassword == "" {
			uo.SentinelPassword = uo.Password
		}
		c = redis.NewFailoverClient(uo.Failover())
	default:
		return nil, fmt.Errorf("redis url %q: scheme must be redis, rediss, redis+cluster, rediss+cluster, redis+sentinel or rediss+sentinel", redactURL(rawURL))
	}
	c.AddHook(deadlineHook{timeout: o.Timeout})
	return c, nil
}

func applyTimeouts(dial, read, write, pool *time.Duration, d time.Duration) {
	for _, p := range []*time.Duration{dial, read, write, pool} {
		if *p == 0 {
			*p = d
		}
	}
}

// redisTLS is the client TLS config: the system roots or caFile's, and the
// server name to verify.
func redisTLS(caFile, serverName, host string) (*tls.Config, error) {
	conf := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: serverName}
	if conf.ServerName == "" && !strings.Contains(host, ",") {
		conf.ServerName = host
	}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("ca_file %s: no PEM certificates", caFile)
		}
		conf.RootCAs = pool
	}
	return conf, nil
}

// deadlineHook gives every command without a context deadline one of
// timeout, retries included: the processor's contexts live as long as the
// client's request, which is no bound for a store call.
type deadlineHook struct{ timeout time.Duration }

func (h deadlineHook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		return next(ctx, network, addr)
	}
}

func (h deadlineHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if _, ok := ctx.Deadline(); ok {
			return next(ctx, cmd)
		}
		ctx, cancel := context.WithTimeout(ctx, h.timeout)
		defer cancel()
		return next(ctx, cmd)
	}
}

func (h deadlineHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if _, ok := ctx.Deadline(); ok {
			return next(ctx, cmds)
		}
		ctx, cancel := context.WithTimeout(ctx, h.timeout)
		defer cancel()
		return next(ctx, cmds)
	}
}

// redisPassword reads REDIS_PASSWORD, or the file REDIS_PASSWORD_FILE names
// (a mounted Secret), so the password need not be part of REDIS_URL.
func redisPassword() (string, error) {
	if f := os.Getenv("REDIS_PASSWORD_FILE"); f != "" {
		b, err := os.ReadFile(f)
		if err != nil {
			return "", fmt.Errorf("REDIS_PASSWORD_FILE: %w", err)
		}
		pw := strings.TrimRight(string(b), "\r\n")
		if pw == "" {
			return "", errors.New("REDIS_PASSWORD_FILE: empty file")
		}
		return pw, nil
	}
	return os.Getenv("REDIS_PASSWORD"), nil
}

// redactURL drops credentials from a URL for error messages.
func redactURL(s string) string {
	if u, err := url.Parse(s); err == nil && u.User != nil {
		u.User = url.User("redacted")
		return u.String()
	}
	return s
}
