package keypool

import (
	"testing"
	"time"

	"github.com/modelgateway/gateway/internal/testclock"
)

// While the vendor's headroom is high every account is admitted; once a
// key reports it under share_below, an account above an equal share of the
// recent requests is refused and the others are not.
func TestShareRefusesTheHeaviestWhenCapacityIsLow(t *testing.T) {
	clock := testclock.New(time.Unix(1e9, 0))
	p := New("alpha", three(), Options{CoolDown: time.Second, MaxCoolDown: time.Minute, ProbeInterval: time.Minute, ShareBelow: 0.2, Now: clock.Now})
	for range 30 {
		if ok, _, _ := p.Share("heavy"); !ok {
			t.Fatal("refused with no word of the vendor's capacity")
		}
	}
	p.Capacity("k1", func(h string) string {
		return map[string]string{"anthropic-ratelimit-requests-remaining": "500", "anthropic-ratelimit-requests-limit": "1000"}[h]
	})
	if ok, _, _ := p.Share("heavy"); !ok {
		t.Fatal("refused at half the vendor's capacity left")
	}
	p.Capacity("k2", func(h string) string {
		return map[string]string{"x-ratelimit-remaining-tokens": "100", "x-ratelimit-limit-tokens": "1000", "x-ratelimit-remaining-requests": "900", "x-ratelimit-limit-requests": "1000"}[h]
	})
	if ok, _, _ := p.Share("light"); !ok {
		t.Fatal("the light account refused")
	}
	ok, used, share := p.Share("heavy")
	if ok || used != 31 || share != 16 {
		t.Fatalf("heavy: admitted %v, used %d, share %d; want refused at 31 of its share of 16", ok, used, share)
	}
	for range 10 {
		if ok, _, _ := p.Share("light"); !ok {
			t.Fatal("the light account refused within its share")
		}
	}
	// The sharing lasts a window past its last refusal: the heaviest is not
	// let loose at once to spend the keys again.
	clock.Advance(ShareWindow - time.Second)
	if ok, _, _ := p.Share("heavy"); ok {
		t.Fatal("heavy let loose within a window of its refusal")
	}
	// A window with no low reading and no refusal: no sharing.
	clock.Advance(ShareWindow)
	if ok, _, _ := p.Share("heavy"); !ok {
		t.Fatal("heavy still refused a window later")
	}
}
