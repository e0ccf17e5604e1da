package main

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// The Redis Cluster client's slot map refresh. go-redis reloads the map on
// MOVED and READONLY replies and, by default, once a minute; a master that
// died answers neither, so without these the client kept dialling it until
// the minute was up, long after its replica had taken its slots.
const (
	// clusterReloadInterval is how old the slot map may get.
	clusterReloadInterval = 5 * time.Second
	// clusterReloadMinGap spaces the reloads that connection errors ask
	// for: under load every request fails at once.
	clusterReloadMinGap = 250 * time.Millisecond
)

// reloadHook asks for a slot map reload when a command fails on the
// connection (refused, reset, timed out) rather than with a Redis reply, at
// most once per minGap.
type reloadHook struct {
	reload func()
	minGap time.Duration
	now    func() time.Time
	last   atomic.Int64 // unix nanoseconds of the last reload asked for
}

func newReloadHook(c *redis.ClusterClient) *reloadHook {
	return &reloadHook{
		reload: func() { c.ReloadState(context.Background()) },
		minGap: clusterReloadMinGap,
		now:    time.Now,
	}
}

func (h *reloadHook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		return next(ctx, network, addr)
	}
}

func (h *reloadHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.failed(err)
		return err
	}
}

func (h *reloadHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		h.failed(err)
		return err
	}
}

// failed asks for a reload when err is a connection error and the last
// reload asked for is at least minGap old.
func (h *reloadHook) failed(err error) {
	if !connectionError(err) {
		return
	}
	now := h.now().UnixNano()
	last := h.last.Load()
	if now-last < h.minGap.Nanoseconds() || !h.last.CompareAndSwap(last, now) {
		return
	}
	h.reload()
}

// connectionError reports whether err came from the connection, not from a
// Redis reply (redis.Nil, a script's error, MOVED) or from the caller
// giving up.
func connectionError(err error) bool {
	var reply redis.Error
	return err != nil && !errors.As(err, &reply) && !errors.Is(err, context.Canceled)
}
