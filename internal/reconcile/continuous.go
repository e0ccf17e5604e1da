package reconcile

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/modelgateway/gateway/internal/vendorusage"
)

// State is where the continuous run keeps its lease, cursor and results
// (the store implements it).
type State interface {
	Keeper
	ReconcileLease(ctx context.Context, holder string, ttl time.Duration) (bool, error)
	ReconcileCursor(ctx context.Context, width string) (time.Time, error)
	ReconcileWindow(ctx context.Context, width string, start, next time.Time, result []byte) error
}

// Continuous reconciles each window of Width once it has been over for
// Delay (the vendors' reporting delay), in order, on one sidecar at a time
// (a lease in the store). A window's result and the cursor past it are
// written together, so a restart or a store outage resumes at the first
// window not written, and a window run twice gives the same rows.
type Continuous struct {
	Runner *Runner
	State  State
	Width  vendorusage.Width
	// Delay is how long after a window's end it is reconciled.
	Delay time.Duration
	// Interval is how often a sidecar looks for windows due.
	Interval time.Duration
	// Lookback is how far back the first run starts.
	Lookback time.Duration
	// Holder names this sidecar in the lease.
	Holder string
	// OnWindow hears of each window reconciled (metrics, alerts); it runs
	// on the runner before the next window.
	OnWindow func(ctx context.Context, start time.Time, rep Report)
	Logger   *slog.Logger
	Now      func() time.Time
}

// maxWindowsPerTick bounds one look's work, so that the lease (renewed
// between windows) is never held past its time by a long catch-up.
const maxWindowsPerTick = 48

// Run looks every Interval until ctx ends.
func (c *Continuous) Run(ctx context.Context) {
	t := time.NewTicker(c.Interval)
	defer t.Stop()
	for {
		if err := c.Tick(ctx); err != nil && ctx.Err() == nil {
			c.Logger.Warn("reconcile: continuous run stopped; resumes at the next look", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Tick reconciles the windows due, if this sidecar holds the lease; it
// returns the first error, the windows before it kept.
func (c *Continuous) Tick(ctx context.Context) error {
	width := string(c.Width)
	d := c.Width.Duration()
	// The lease outlives a look by a margin: one runner at a time.
	ttl := 2*c.Interval + time.Minute
	for n := 0; n < maxWindowsPerTick; n++ {
		ok, err := c.State.ReconcileLease(ctx, c.Holder, ttl)
		if err != nil || !ok {
			return err
		}
		start, err := c.State.ReconcileCursor(ctx, width)
		if err != nil {
			return err
		}
		now := c.Now()
		if start.IsZero() {
			start = now.Add(-c.Lookback).UTC().Truncate(d)
		}
		end := start.Add(d)
		if end.Add(c.Delay).After(now) {
			return nil // not due yet
		}
		rep, err := c.window(ctx, start, end, ttl)
		if err != nil {
			return err
		}
		b, err := jsonOf(rep)
		if err != nil {
			return fmt.Errorf("reconcile: %w", err)
		}
		// Heard of before it is written: a stop between the two runs the
		// window again, and its alert is claimed once whatever the runs.
		if c.OnWindow != nil {
			c.OnWindow(ctx, start, rep)
		}
		if err := c.State.ReconcileWindow(ctx, width, start, end, b); err != nil {
			return err
		}
	}
	return nil
}

// errLeaseLost stops a window whose lease another sidecar took.
var errLeaseLost = errors.New("reconcile: the lease was lost mid-window")

// window reconciles the window of start, renewing the lease every Interval
// while it runs: a vendor's rate limits, waited out page by page, may
// outlast one lease, and must not let a second runner in. A renewal that
// finds another holder stops the window; one the store fails is tried
// again at the next.
func (c *Continuous) window(ctx context.Context, start, end time.Time, ttl time.Duration) (Report, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	done := make(chan struct{})
	var renewing sync.WaitGroup
	renewing.Add(1)
	go func() {
		defer renewing.Done()
		t := time.NewTicker(c.Interval)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			if ok, err := c.State.ReconcileLease(ctx, c.Holder, ttl); err == nil && !ok {
				cancel(errLeaseLost)
				return
			}
		}
	}()
	rep, err := c.Runner.Run(ctx, start, end, c.Width)
	if err == nil {
		err = c.dayCosts(ctx, start, end, &rep)
	}
	close(done)
	renewing.Wait()
	if cause := context.Cause(ctx); errors.Is(cause, errLeaseLost) {
		return Report{}, cause
	}
	return rep, err
}

// dayCosts adds the day's cost comparison to the result of the hour that
// ends it.
func (c *Continuous) dayCosts(ctx context.Context, start, end time.Time, rep *Report) error {
	if c.Width != vendorusage.Hour || !end.Equal(end.Truncate(day)) {
		return nil
	}
	from := end.Add(-day)
	kept, err := Kept(ctx, c.State, c.Width, from, start)
	if err != nil {
		return err
	}
	if len(kept) != int(day/time.Hour)-1 {
		return nil // a day the run did not see whole (its first)
	}
	rows := slices.Clone(rep.Rows)
	for _, w := range kept {
		rows = append(rows, w.Rows...)
	}
	rep.Costs, err = c.Runner.Costs(ctx, from, end, rows)
	return err
}

// jsonOf is a window's result as kept.
func jsonOf(rep Report) ([]byte, error) { return json.Marshal(rep) }

// Window is one kept window's result.
type Window struct {
	Start time.Time
	Report
}

// Keeper is where the continuous run's results are read (the store).
type Keeper interface {
	ReconcileWindows(ctx context.Context, width string, from, to time.Time) (map[time.Time][]byte, error)
}

// Kept returns the kept windows of width starting in [from, to), oldest
// first.
func Kept(ctx context.Context, k Keeper, width vendorusage.Width, from, to time.Time) ([]Window, error) {
	m, err := k.ReconcileWindows(ctx, string(width), from, to)
	if err != nil {
		return nil, err
	}
	out := make([]Window, 0, len(m))
	for start, b := range m {
		w := Window{Start: start}
		if err := json.Unmarshal(b, &w.Report); err != nil {
			return nil, fmt.Errorf("reconcile: window %s: %w", start.Format(time.RFC3339), err)
		}
		out = append(out, w)
	}
	slices.SortFunc(out, func(a, b Window) int { return a.Start.Compare(b.Start) })
	return out, nil
}
