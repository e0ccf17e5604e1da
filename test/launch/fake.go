package launch

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/modelgateway/gateway/internal/config"
)

// FakeControlsHeader steers the fake on one request (cmd/fakevendor): the
// stack's upstreams forward it.
const FakeControlsHeader = "x-fake-controls"

// TestIDHeader marks a test's request so that the fakes' request log
// shows which one it was; the stack's upstreams forward it.
const TestIDHeader = "x-test-id"

// Fake is a running fake vendor (cmd/fakevendor).
type Fake struct {
	Name    string
	Addrs   FakeAddrs
	Process *Process
	// T reports the failures of the test helpers below (Control, Requests,
	// ...); tests set it.
	T TB
}

// FakeAddrs are the fake's listeners.
type FakeAddrs struct {
	Messages        string `json:"messages"`
	ChatCompletions string `json:"chat_completions"`
	Control         string `json:"control"`
}

// URL is the base URL of the fake's listener for a wire format.
func (a FakeAddrs) URL(format string) string {
	if format == config.FormatMessages {
		return "http://" + a.Messages
	}
	return "http://" + a.ChatCompletions
}

// Record is one request the fake received.
type Record struct {
	Format  string              `json:"format"` // config.FormatMessages or config.FormatChatCompletions
	Method  string              `json:"method"`
	Path    string              `json:"path"`
	Query   string              `json:"query"`
	Headers map[string][]string `json:"headers"`
	Body    []byte              `json:"body"` // base64 in JSON
	At      time.Time           `json:"at"`
}

// StartFake starts cmd/fakevendor (bin) as the named endpoint, demanding
// the vendor keys in env (FAKE_MESSAGES_KEY, FAKE_CHAT_COMPLETIONS_KEY), with its log and
// address file in dir.
func StartFake(ctx context.Context, dir, bin, name string, env []string) (*Fake, error) {
	addrFile := filepath.Join(dir, "fake-"+name+".json")
	os.Remove(addrFile)
	p, err := StartProcess("fake-"+name, bin, []string{"-name", name, "-addr-file", addrFile}, env,
		filepath.Join(dir, "fake-"+name+".log"))
	if err != nil {
		return nil, err
	}
	f := &Fake{Name: name, Process: p}
	if err := WaitJSONFile(ctx, addrFile, &f.Addrs, p); err != nil {
		p.StopWithin(time.Second)
		return nil, fmt.Errorf("fake vendor %s: %w", name, err)
	}
	return f, nil
}

// Control changes the fake's behaviour (see cmd/fakevendor).
func (f *Fake) Control(settings map[string]any) {
	f.T.Helper()
	f.post("/control", settings)
}

// Reset clears the fake's controls and records.
func (f *Fake) Reset() {
	f.T.Helper()
	f.post("/reset", nil)
}

func (f *Fake) post(path string, v any) {
	f.T.Helper()
	var body io.Reader = http.NoBody
	if v != nil {
		b, _ := json.Marshal(v)
		body = bytes.NewReader(b)
	}
	resp, err := http.Post("http://"+f.Addrs.Control+path, "application/json", body)
	if err != nil {
		f.T.Fatalf("fake %s %s: %v", f.Name, path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		b, _ := io.ReadAll(resp.Body)
		f.T.Fatalf("fake %s %s: %d %s", f.Name, path, resp.StatusCode, b)
	}
}

// Requests returns the requests the fake received, oldest first.
func (f *Fake) Requests() []Record {
	f.T.Helper()
	var recs []Record
	f.get("/requests", &recs)
	return recs
}

// APIRequests returns how many API requests (probes aside) the fake
// received, in both wire formats: HTTP requests, and each response a
// socket asked for (not the upgrade that opened the socket).
func (f *Fake) APIRequests() int {
	f.T.Helper()
	st := f.Stats()
	return st["messages"] + st["chat_completions"]
}

// Stats returns the fake's request counters: by wire format ("messages",
// "chat_completions"), and of each its probes ("messages_probes") and the
// requests held by the hang control ("messages_hung").
func (f *Fake) Stats() map[string]int {
	f.T.Helper()
	m := map[string]int{}
	f.get("/stats", &m)
	return m
}

func (f *Fake) get(path string, v any) {
	f.T.Helper()
	resp, err := http.Get("http://" + f.Addrs.Control + path)
	if err != nil {
		f.T.Fatalf("fake %s %s: %v", f.Name, path, err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		f.T.Fatalf("fake %s %s: %v", f.Name, path, err)
	}
}

// LastRequest returns the newest request in a wire format
// (config.FormatMessages or config.FormatChatCompletions) to path, failing
// when there is none.
func (f *Fake) LastRequest(format, path string) Record {
	f.T.Helper()
	recs := f.Requests()
	for i := len(recs) - 1; i >= 0; i-- {
		if recs[i].Format == format && recs[i].Path == path {
			return recs[i]
		}
	}
	f.T.Fatalf("fake %s received no %s %s request", f.Name, format, path)
	return Record{}
}

// RequestsTo returns the requests the fake received in a wire format to
// path, oldest first.
func (f *Fake) RequestsTo(format, path string) []Record {
	var out []Record
	for _, r := range f.Requests() {
		if r.Format == format && r.Path == path {
			out = append(out, r)
		}
	}
	return out
}

// KeyStats are the fake's figures for one vendor key (GET /keys).
type KeyStats struct {
	Requests    int64 `json:"requests"`
	Forced      int64 `json:"forced"`
	CacheReads  int64 `json:"cache_reads"`
	CacheWrites int64 `json:"cache_writes"`
	Limited     int64 `json:"limited"` // answered 429 by the key_rps control
}

// KeyLabel is how the fake names a secret (cmd/fakevendor's KeyLabel).
func KeyLabel(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:4])
}

// Keys returns the fake's figures per key, by the key's secret among
// secrets (keys the fake has not seen are zero).
func (f *Fake) Keys(secrets ...string) map[string]KeyStats {
	f.T.Helper()
	var byLabel map[string]KeyStats
	f.get("/keys", &byLabel)
	out := make(map[string]KeyStats, len(secrets))
	for _, s := range secrets {
		out[s] = byLabel[KeyLabel(s)]
	}
	return out
}

// VendorKeyID is the fake's id of a secret in its usage reports
// (cmd/fakevendor's VendorKeyID).
func VendorKeyID(secret string) string { return "key_" + KeyLabel(secret) }

// AddUsage bills usage to secret at the fake, in a wire format's usage
// report, as if someone had used the key without the gateway. tokens are
// POST /usage's counts (input_tokens, output_tokens, ...).
func (f *Fake) AddUsage(format, secret, model string, tokens map[string]int64) {
	f.T.Helper()
	body := map[string]any{"format": format, "key": KeyLabel(secret), "model": model}
	for k, v := range tokens {
		body[k] = v
	}
	f.post("/usage", body)
}

// ForceKey makes the fake answer status (with retry-after, when not empty)
// to every API request carrying secret; status 0 clears it.
func (f *Fake) ForceKey(secret string, status int, retryAfter string) {
	f.T.Helper()
	f.post("/keys", map[string]any{"key": KeyLabel(secret), "status": status, "retry_after": retryAfter})
}
