package extproc

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/modelgateway/gateway/internal/account"
)

// gatedOwners holds its first bind until release and records how many
// bindings each round trip carried.
type gatedOwners struct {
	entered chan struct{}
	release chan struct{}
	trips   []int
	bound   map[string]string
}

func (o *gatedOwners) Bind(ctx context.Context, bs ...account.Binding) error {
	if len(o.trips) == 0 {
		close(o.entered)
		<-o.release
	}
	o.trips = append(o.trips, len(bs))
	for _, b := range bs {
		for _, id := range b.IDs {
			o.bound[id] = b.Account
		}
	}
	return nil
}

func (o *gatedOwners) ResponseOwners(ctx context.Context, ids []string) ([]string, []string, error) {
	return make([]string, len(ids)), make([]string, len(ids)), nil
}

// Binds queued while a round trip is in flight share the next one: ten
// streams' binds cost two round trips, not ten; a bind queued on an idle
// binder leaves at once; each caller's channel closes only once its own
// bind has landed, and every id is bound to its own account.
func TestBindsShareRoundTrips(t *testing.T) {
	r := newRig(t)
	o := &gatedOwners{entered: make(chan struct{}), release: make(chan struct{}), bound: map[string]string{}}
	r.srv.owners = o
	first := r.srv.binds.add("req_0", account.Binding{Account: "acct_0", IDs: []string{"resp_0"}})
	<-o.entered // the first round trip is in flight
	var rest []<-chan struct{}
	for i := 1; i < 10; i++ {
		rest = append(rest, r.srv.binds.add(fmt.Sprint("req_", i), account.Binding{Account: fmt.Sprint("acct_", i), IDs: []string{fmt.Sprint("resp_", i), fmt.Sprint("msg_", i)}}))
	}
	for _, d := range append(rest, first) {
		select {
		case <-d:
			t.Fatal("a bind was reported landed while its round trip was held")
		default:
		}
	}
	close(o.release)
	<-first
	for _, d := range rest {
		<-d
	}
	if !slices.Equal(o.trips, []int{1, 9}) {
		t.Fatalf("round trips carried %v bindings; want [1 9]", o.trips)
	}
	for i := range 10 {
		if got, want := o.bound[fmt.Sprint("resp_", i)], fmt.Sprint("acct_", i); got != want {
			t.Fatalf("resp_%d bound to %q; want %q", i, got, want)
		}
	}
}
