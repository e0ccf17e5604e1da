// Package testclock is the settable clock of the tests: its Now goes
// wherever code takes a clock (store.Options.Now, holds.Renewer.Now, ...),
// and the test moves it with Set and Advance instead of waiting.
package testclock

import (
	"sync"
	"time"
)

// Clock is a settable clock, safe for concurrent use.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// New returns a clock reading t.
func New(t time.Time) *Clock { return &Clock{t: t} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Set moves the clock to t.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

// Advance moves the clock on by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}
