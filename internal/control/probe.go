package control

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// ErrStoreSlow is what a health check reports when the store did not answer
// a ping within the probe's timeout.
var ErrStoreSlow = errors.New("store did not answer in time")

// StoreProbe pings the store on behalf of every health reader. No lock is
// held across a ping: one ping runs at a time, in its own goroutine, bounded
// by Timeout, and readers wait for it at most that long. A hung store
// therefore costs a health check at most Timeout, never the client's whole
// deadline.
type StoreProbe struct {
	ping func(context.Context) error
	// Timeout bounds one ping; TTL is how long a result answers readers.
	timeout, ttl time.Duration
	now          func() time.Time
	// onChange is called (outside the lock) with each result.
	onChange func(up bool)

	mu       sync.Mutex
	at       time.Time // when the last finished ping started
	err      error
	done     bool          // a ping has finished
	inflight chan struct{} // closed when the running ping ends; nil when none runs
}

// ProbeOptions tune a StoreProbe; zero values pick the defaults.
type ProbeOptions struct {
	// Timeout bounds one ping (default 800ms, so that /health answers within
	// a second whatever the store does).
	Timeout time.Duration
	// TTL is how long one result is reused (default 500ms).
	TTL time.Duration
	Now func() time.Time
	// OnResult is told every ping's outcome: the store-up gauge and the
	// gRPC health status of the store service follow it.
	OnResult func(up bool)
}

// NewStoreProbe returns a probe that calls ping.
func NewStoreProbe(ping func(context.Context) error, o ProbeOptions) *StoreProbe {
	if o.Timeout <= 0 {
		o.Timeout = 800 * time.Millisecond
	}
	if o.TTL <= 0 {
		o.TTL = 500 * time.Millisecond
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &StoreProbe{ping: ping, timeout: o.Timeout, ttl: o.TTL, now: o.Now, onChange: o.OnResult}
}

// Check returns the store's state: a fresh cached result, else the result
// of a ping that ends within the probe timeout.
func (p *StoreProbe) Check(ctx context.Context) error {
	p.mu.Lock()
	now := p.now()
	if p.done && !now.Before(p.at) && now.Sub(p.at) < p.ttl {
		err := p.err
		p.mu.Unlock()
		return err
	}
	ch := p.inflight
	if ch == nil {
		ch = make(chan struct{})
		p.inflight = ch
		go p.run(now, ch)
	}
	p.mu.Unlock()

	t := time.NewTimer(p.timeout + 50*time.Millisecond)
	defer t.Stop()
	select {
	case <-ch:
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.err
	case <-t.C:
		return ErrStoreSlow
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (p *StoreProbe) run(started time.Time, ch chan struct{}) {
	ctx, cancel := context.WithTimeout(context.Background(), p.timeout)
	err := p.ping(ctx)
	cancel()
	if err != nil && ctx.Err() != nil {
		// Keep the cause: it may name the shard that did not answer.
		err = fmt.Errorf("%w: %w", ErrStoreSlow, err)
	}
	p.mu.Lock()
	p.at, p.err, p.done, p.inflight = started, err, true, nil
	p.mu.Unlock()
	close(ch)
	if p.onChange != nil {
		p.onChange(err == nil)
	}
}

// Run checks the store every interval until ctx ends, so that the gauge
// and the gRPC health status stay current without anyone polling /health.
func (p *StoreProbe) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		p.Check(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
