package extproc

import (
	"context"
	"sync"
	"time"

	"github.com/modelgateway/gateway/internal/account"
)

// binder writes the owners of stored objects (stored.go) off the streams
// that name them. One goroutine sends, in one pipelined round trip, every
// bind queued while the previous round trip was in flight: at a hundred
// streams a second their binds share round trips instead of each paying
// one, and a goroutine, of its own. Nothing waits to gather more: a bind
// queued on an idle binder leaves at once.
type binder struct {
	s *Server // its owners are read at each round trip (tests swap them)

	mu    sync.Mutex
	queue []bindJob
	wake  chan struct{}
}

type bindJob struct {
	requestID string
	b         account.Binding
	done      chan struct{} // closed once the bind has landed, or failed
}

// bindTimeout bounds one round trip: the binds' callers wait for it
// (a stream's last chunk), never on a client's context.
const bindTimeout = 5 * time.Second

func newBinder(s *Server) *binder {
	b := &binder{s: s, wake: make(chan struct{}, 1)}
	go b.run()
	return b
}

// add queues binding bd and returns a channel closed once it has landed
// (or failed, logged). Binds land in the order they were added: the
// channel of the last closes after every earlier one's.
func (b *binder) add(requestID string, bd account.Binding) <-chan struct{} {
	j := bindJob{requestID: requestID, b: bd, done: make(chan struct{})}
	b.mu.Lock()
	b.queue = append(b.queue, j)
	first := len(b.queue) == 1
	b.mu.Unlock()
	if first {
		signal(b.wake)
	}
	return j.done
}

func (b *binder) run() {
	for range b.wake {
		for {
			b.mu.Lock()
			jobs := b.queue
			b.queue = nil
			b.mu.Unlock()
			if len(jobs) == 0 {
				break
			}
			b.apply(jobs)
		}
	}
}

// apply sends jobs in one round trip. A failure leaves their objects
// unbound: unreachable through the gateway, refused, never shown to
// another account.
func (b *binder) apply(jobs []bindJob) {
	bs := make([]account.Binding, len(jobs))
	for i, j := range jobs {
		bs[i] = j.b
	}
	ctx, cancel := context.WithTimeout(context.Background(), bindTimeout)
	err := b.s.owners.Bind(ctx, bs...)
	cancel()
	for _, j := range jobs {
		if err != nil {
			b.s.log.Error("binding stored responses or items failed", "request_id", j.requestID, "err", err)
			b.s.metrics.storeErrors.WithLabelValues("bind").Inc()
		}
		close(j.done)
	}
}
