package keypool

import (
	"fmt"
	"testing"
	"time"

	"github.com/modelgateway/gateway/internal/testclock"
)

func newPool(clock *testclock.Clock, keys ...Key) *Pool {
	return New("alpha", keys, Options{CoolDown: 10 * time.Second, MaxCoolDown: time.Minute, ProbeInterval: 10 * time.Minute, Now: clock.Now})
}

func three() []Key {
	return []Key{{Name: "k1", Weight: 1}, {Name: "k2", Weight: 1}, {Name: "k3", Weight: 1}}
}

// Sessions stay on their key; when a key cools down only its sessions
// move, and they come back when it returns.
func TestSessionsStayAndMoveOnlyWithTheirKey(t *testing.T) {
	clock := testclock.New(time.Unix(1e9, 0))
	p := newPool(clock, three()...)
	before := map[string]string{}
	per := map[string]int{}
	for i := range 300 {
		s := fmt.Sprintf("session-%d", i)
		k := p.Choose("acct", s).Name
		if again := p.Choose("acct", s).Name; again != k {
			t.Fatalf("%s went to %s then %s", s, k, again)
		}
		before[s] = k
		per[k]++
	}
	for _, k := range []string{"k1", "k2", "k3"} {
		if per[k] < 60 {
			t.Fatalf("sessions per key %v: not spread", per)
		}
	}
	if _, changed := p.Failed("k2", 429, 3*time.Second, time.Time{}); !changed {
		t.Fatal("a 429 did not cool k2 down")
	}
	for s, k := range before {
		got := p.Choose("acct", s).Name
		if got == "k2" || (k != "k2" && got != k) {
			t.Fatalf("with k2 cooling, %s (on %s) went to %s", s, k, got)
		}
	}
	clock.Advance(3 * time.Second)
	for s, k := range before {
		if got := p.Choose("acct", s).Name; got != k {
			t.Fatalf("after k2's retry-after, %s (on %s) is on %s", s, k, got)
		}
	}
}

// Without a retry-after the cool-down backs off: 10 s, then 20 s while
// the key keeps answering 429; a reply it serves resets the backoff.
func TestCoolDownBacksOff(t *testing.T) {
	clock := testclock.New(time.Unix(1e9, 0))
	p := newPool(clock, three()...)
	p.Failed("k1", 429, 0, time.Time{})
	if st := p.States()[0]; st.State != Cooling || st.Until.Sub(clock.Now()) != 10*time.Second || st.Status != 429 {
		t.Fatalf("%+v", st)
	}
	clock.Advance(10 * time.Second)
	if st := p.States()[0]; st.State != Active {
		t.Fatalf("after its cool-down: %+v", st)
	}
	p.Choose("acct", "x")
	p.Failed("k1", 529, 0, time.Time{})
	if st := p.States()[0]; st.Until.Sub(clock.Now()) != 20*time.Second {
		t.Fatalf("second cool-down %v; want 20s", st.Until.Sub(clock.Now()))
	}
	clock.Advance(20 * time.Second)
	p.Choose("acct", "x")
	p.Served("k1")
	p.Failed("k1", 429, 0, time.Time{})
	if st := p.States()[0]; st.Until.Sub(clock.Now()) != 10*time.Second {
		t.Fatalf("after a served reply the backoff is %v; want 10s again", st.Until.Sub(clock.Now()))
	}
	// A retry-after beyond max_cool_down is capped.
	p.Failed("k2", 429, time.Hour, time.Time{})
	if st := p.States()[1]; st.Until.Sub(clock.Now()) != time.Minute {
		t.Fatalf("retry-after 1h: cooling %v; want the 1m cap", st.Until.Sub(clock.Now()))
	}
}

// A refused key is out, reported once, and lent to one request per probe
// interval; a reply it serves brings it back.
func TestRefusedKeyIsProbed(t *testing.T) {
	clock := testclock.New(time.Unix(1e9, 0))
	var events []string
	p := New("alpha", three(), Options{CoolDown: time.Second, MaxCoolDown: time.Minute, ProbeInterval: 10 * time.Minute, Now: clock.Now,
		OnChange: func(u, k, st string, status int, _ time.Time) {
			events = append(events, fmt.Sprintf("%s/%s %s %d", u, k, st, status))
		}})
	if _, changed := p.Failed("k3", 401, 0, time.Time{}); !changed {
		t.Fatal("401 did not take k3 out")
	}
	if _, changed := p.Failed("k3", 401, 0, time.Time{}); changed {
		t.Fatal("a second 401 changed k3 again")
	}
	for i := range 100 {
		if k := p.Choose("acct", fmt.Sprint(i)).Name; k == "k3" {
			t.Fatal("a disabled key was chosen before its probe")
		}
	}
	clock.Advance(10 * time.Minute)
	probes := 0
	for i := range 100 {
		if p.Choose("acct", fmt.Sprint(i)).Name == "k3" {
			probes++
		}
	}
	if probes != 1 {
		t.Fatalf("%d requests probed k3; want 1 per interval", probes)
	}
	p.Served("k3")
	if st := p.States()[2]; st.State != Active {
		t.Fatalf("after its probe served: %+v", st)
	}
	want := []string{"alpha/k3 disabled 401", "alpha/k3 active 0"}
	if fmt.Sprint(events) != fmt.Sprint(want) {
		t.Fatalf("events %v; want %v", events, want)
	}
}

// A pinned key serves only its accounts, and they only their pinned keys.
func TestPinnedKeys(t *testing.T) {
	clock := testclock.New(time.Unix(1e9, 0))
	p := newPool(clock, Key{Name: "shared1", Weight: 1}, Key{Name: "shared2", Weight: 1},
		Key{Name: "tenant", Weight: 1, Accounts: []string{"acct_t"}})
	for i := range 200 {
		if k := p.Choose("acct_other", fmt.Sprint(i)).Name; k == "tenant" {
			t.Fatal("another account's session went to a pinned key")
		}
		if k := p.Choose("acct_t", fmt.Sprint(i)).Name; k != "tenant" {
			t.Fatalf("the pinned account went to %s", k)
		}
	}
	// Its key cooling, the pinned account still gets its own key (Envoy's
	// aggregate for it has no other): never a shared one.
	p.Failed("tenant", 429, time.Second, time.Time{})
	if k := p.Choose("acct_t", "s").Name; k != "tenant" {
		t.Fatalf("pinned account on %s while its key cools down", k)
	}
}

// Forbids says what Choose never chooses: a key must serve a request that
// names an object it keeps only when Choose could have chosen it, and a
// key the pool does not have forbids nothing.
func TestForbidsWhatChooseNeverChooses(t *testing.T) {
	clock := testclock.New(time.Unix(1e9, 0))
	p := newPool(clock, Key{Name: "shared", Weight: 1}, Key{Name: "tenant", Weight: 1, Accounts: []string{"acct_t"}})
	for _, c := range []struct {
		account, key string
		want         bool
	}{
		{"acct_other", "shared", false},
		{"acct_other", "tenant", true}, // another tenant's key
		{"acct_t", "tenant", false},
		{"acct_t", "shared", true},    // a pinned tenant never on a shared key
		{"acct_t", "default", false},  // the single key before the pool: not the pool's
		{"acct_other", "gone", false}, // a key no longer configured
	} {
		if got := p.Forbids(c.account, c.key); got != c.want {
			t.Errorf("Forbids(%s, %s) = %v, want %v", c.account, c.key, got, c.want)
		}
	}
	for i := range 100 {
		for _, acct := range []string{"acct_t", "acct_other"} {
			if k := p.Choose(acct, fmt.Sprint(i)).Name; p.Forbids(acct, k) {
				t.Fatalf("Choose gave %s the key %s, which Forbids", acct, k)
			}
		}
	}
}

// Attempts in flight when a cool-down began (their failures arrive after
// it) extend it by its own backoff, not the next one's: one burst of 529s
// cools the key for cool_down, not twice that.
func TestAttemptsOfOneCoolDownKeepItsBackoff(t *testing.T) {
	clock := testclock.New(time.Unix(1e9, 0))
	p := newPool(clock, three()...)
	p.Failed("k2", 529, 0, time.Time{})
	clock.Advance(100 * time.Millisecond)
	p.Failed("k2", 529, 0, time.Time{}) // in flight when the cool-down began
	if st := p.States()[1]; st.Until.Sub(clock.Now()) != 10*time.Second {
		t.Fatalf("cooling %v after the burst's second 529; want 10s (its own backoff)", st.Until.Sub(clock.Now()))
	}
}

// A cool-down ends on its own: the state (and gateway_vendor_key_state,
// fed by OnChange) says active without a request choosing the key.
func TestCoolDownEndsWithoutTraffic(t *testing.T) {
	changes := make(chan string, 4)
	p := New("alpha", three(), Options{CoolDown: 20 * time.Millisecond, MaxCoolDown: time.Second, ProbeInterval: time.Minute,
		OnChange: func(upstream, key, state string, status int, until time.Time) { changes <- key + " " + state }})
	p.Failed("k1", 429, 0, time.Time{})
	if c := <-changes; c != "k1 cooling" {
		t.Fatalf("first change %q", c)
	}
	if c := <-changes; c != "k1 active" {
		t.Fatalf("after the cool-down %q; want k1 active", c)
	}
}

// Envoy's log reports a burst's failures late: one sent before the key
// came back from its cool-down does not cool it again; one sent after
// does.
func TestLateFailureOfAnEndedCoolDown(t *testing.T) {
	clock := testclock.New(time.Unix(1e9, 0))
	p := newPool(clock, three()...)
	burst := clock.Now()
	p.Failed("k1", 529, 0, burst)
	clock.Advance(10 * time.Second)
	p.Choose("acct", "x") // the cool-down is over: k1 is back
	if st, changed := p.Failed("k1", 529, 0, burst.Add(time.Millisecond)); st != Active || changed {
		t.Fatalf("a late failure of the burst: %s (changed %v); want k1 still active", st, changed)
	}
	if st, _ := p.Failed("k1", 529, 0, clock.Now()); st != Cooling {
		t.Fatalf("a failure sent after k1 came back: %s; want cooling", st)
	}
}
