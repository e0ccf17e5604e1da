package launch

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Fake is a running fake vendor (cmd/fakevendor).
type Fake struct {
	Name    string
	Addrs   FakeAddrs
	Process *Process
	tb      testing.TB
}

// FakeAddrs are the fake's listeners.
type FakeAddrs struct {
	Alpha   string `json:"alpha"`
	Beta    string `json:"beta"`
	Control string `json:"control"`
}

// Record is one request the fake received.
type Record struct {
	Vendor  string              `json:"vendor"`
	Method  string              `json:"method"`
	Path    string              `json:"path"`
	Query   string              `json:"query"`
	Headers map[string][]string `json:"headers"`
	Body    []byte              `json:"body"` // base64 in JSON
	At      time.Time           `json:"at"`
}

func startFake(tb testing.TB, dir, name string) *Fake {
	tb.Helper()
	addrFile := filepath.Join(dir, "fake-"+name+".json")
	p := startProcess(tb, dir, "fake-"+name, Binary(tb, "fakevendor"),
		[]string{"-name", name, "-addr-file", addrFile},
		[]string{"FAKE_ALPHA_KEY=" + AlphaVendorKey, "FAKE_BETA_KEY=" + BetaVendorKey})
	f := &Fake{Name: name, Process: p, tb: tb}
	tb.Cleanup(p.Stop)
	deadline := time.Now().Add(20 * time.Second)
	for {
		if b, err := os.ReadFile(addrFile); err == nil && json.Unmarshal(b, &f.Addrs) == nil {
			return f
		}
		if p.Exited() || time.Now().After(deadline) {
			tb.Fatalf("fake vendor %s did not start:\n%s", name, p.Tail(2000))
		}
		time.Sleep(10 * time.Millisecond) // polling interval
	}
}

// Control changes the fake's behaviour (see cmd/fakevendor).
func (f *Fake) Control(settings map[string]any) {
	f.tb.Helper()
	f.post("/control", settings)
}

// Reset clears the fake's controls and records.
func (f *Fake) Reset() {
	f.tb.Helper()
	f.post("/reset", nil)
}

func (f *Fake) post(path string, v any) {
	f.tb.Helper()
	var body io.Reader = http.NoBody
	if v != nil {
		b, _ := json.Marshal(v)
		body = bytes.NewReader(b)
	}
	resp, err := http.Post("http://"+f.Addrs.Control+path, "application/json", body)
	if err != nil {
		f.tb.Fatalf("fake %s %s: %v", f.Name, path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		b, _ := io.ReadAll(resp.Body)
		f.tb.Fatalf("fake %s %s: %d %s", f.Name, path, resp.StatusCode, b)
	}
}

// Requests returns the requests the fake received, oldest first.
func (f *Fake) Requests() []Record {
	f.tb.Helper()
	var recs []Record
	f.get("/requests", &recs)
	return recs
}

// Stats returns the fake's request counters.
func (f *Fake) Stats() map[string]int {
	f.tb.Helper()
	m := map[string]int{}
	f.get("/stats", &m)
	return m
}

func (f *Fake) get(path string, v any) {
	f.tb.Helper()
	resp, err := http.Get("http://" + f.Addrs.Control + path)
	if err != nil {
		f.tb.Fatalf("fake %s %s: %v", f.Name, path, err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		f.tb.Fatalf("fake %s %s: %v", f.Name, path, err)
	}
}

// LastRequest returns the newest request of a vendor ("alpha" or "beta") and
// path, failing when there is none.
func (f *Fake) LastRequest(vendor, path string) Record {
	f.tb.Helper()
	recs := f.Requests()
	for i := len(recs) - 1; i >= 0; i-- {
		if recs[i].Vendor == vendor && recs[i].Path == path {
			return recs[i]
		}
	}
	f.tb.Fatalf("fake %s received no %s %s request", f.Name, vendor, path)
	return Record{}
}
