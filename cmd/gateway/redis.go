package main

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/redis/go-redis/v9"
)

// newRedis connects to REDIS_URL-style addresses:
//
//	redis://[:password@]host:port[/db]          standalone (rediss:// for TLS)
//	redis+cluster://host:port,host:port         Redis Cluster
//	redis+sentinel://host:port,host:port/master Sentinel-managed primary
func newRedis(rawURL string) (redis.UniversalClient, error) {
	scheme, rest, ok := strings.Cut(rawURL, "://")
	if !ok {
		return nil, fmt.Errorf("redis url %q: missing scheme", redactURL(rawURL))
	}
	switch scheme {
	case "redis", "rediss":
		opts, err := redis.ParseURL(rawURL)
		if err != nil {
			return nil, fmt.Errorf("redis url %q: %w", redactURL(rawURL), err)
		}
		return redis.NewClient(opts), nil
	case "redis+cluster", "redis+sentinel":
		u, err := url.Parse("redis://" + rest)
		if err != nil {
			return nil, fmt.Errorf("redis url %q: %w", redactURL(rawURL), err)
		}
		o := &redis.UniversalOptions{Addrs: strings.Split(u.Host, ",")}
		if u.User != nil {
			o.Username = u.User.Username()
			o.Password, _ = u.User.Password()
		}
		if scheme == "redis+cluster" {
			return redis.NewClusterClient(o.Cluster()), nil
		}
		o.MasterName = strings.Trim(u.Path, "/")
		if o.MasterName == "" {
			return nil, fmt.Errorf("redis url %q: sentinel needs a master name as the path", redactURL(rawURL))
		}
		return redis.NewFailoverClient(o.Failover()), nil
	}
	return nil, fmt.Errorf("redis url %q: scheme must be redis, rediss, redis+cluster or redis+sentinel", redactURL(rawURL))
}

// redactURL drops credentials from a URL for error messages.
func redactURL(s string) string {
	if u, err := url.Parse(s); err == nil && u.User != nil {
		u.User = url.User("redacted")
		return u.String()
	}
	return s
}
