package reconcile

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/config"
	"github.com/modelgateway/gateway/internal/ledger"
	"github.com/modelgateway/gateway/internal/usage"
	"github.com/modelgateway/gateway/internal/vendorusage"
)

// ledgerOf is a store's ledger of fixed entries, each account's.
type ledgerOf map[string][]ledger.Entry

func (l ledgerOf) ListAccounts(context.Context) ([]account.Account, error) {
	var out []account.Account
	for id := range l {
		out = append(out, account.Account{ID: id})
	}
	return out, nil
}

func (l ledgerOf) LedgerBetween(_ context.Context, id string, from, to time.Time, after string, limit int) ([]ledger.Entry, string, error) {
	var out []ledger.Entry
	for _, e := range l[id] {
		// The entry's settlement time, as its stream id says.
		if !e.EndedAt.Before(from) && e.EndedAt.Before(to) {
			out = append(out, e)
		}
	}
	return out, "", nil
}

func (l ledgerOf) AbandonedBetween(context.Context, time.Time, time.Time) ([]account.AbandonedAttempt, error) {
	return nil, nil
}

// A run reads each upstream's report under its relay route, every
// account's entries that started in the window (one settled after the
// window's end included), and gives each entry to the upstream serving its
// model.
func TestRun(t *testing.T) {
	var paths []string
	relay := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		paths = append(paths, r.URL.Path)
		switch r.URL.Path {
		case "/alpha" + vendorusage.AnthropicPath:
			w.Write([]byte(`{"data":[{"starting_at":"2026-01-02T10:00:00Z","ending_at":"2026-01-02T11:00:00Z","results":[{"uncached_input_tokens":30,"output_tokens":10,"api_key_id":"key_1","model":"claude-x"}]}],"has_more":false}`))
		case "/beta" + vendorusage.OpenAIPath:
			w.Write([]byte(`{"object":"page","data":[{"start_time":1767348000,"end_time":1767351600,"results":[{"input_tokens":5,"output_tokens":1,"api_key_id":"key_b","model":"gpt-x"}]}],"has_more":false}`))
		default:
			emptyOrNotFound(w, r)
		}
	}))
	defer relay.Close()
	at := hour.Add(30 * time.Minute)
	st := func(model string, u usage.Usage, start, end time.Time) ledger.Entry {
		return ledger.Entry{Settlement: account.Settlement{VendorKey: "k1", Priced: usage.PricedModel(model), StartedAt: start, EndedAt: end, Usage: u}}
	}
	r := &Runner{
		Relay: relay.URL, Client: relay.Client(), Settling: time.Hour,
		Upstreams: []Upstream{
			{Name: "alpha", Format: config.FormatMessages, Keys: map[string]string{"k1": "key_1"}, Serves: func(m string) bool { return strings.HasPrefix(m, "claude") }},
			{Name: "beta", Format: config.FormatChatCompletions, Keys: map[string]string{"k1": "key_b"}, Serves: func(m string) bool { return strings.HasPrefix(m, "gpt") }},
		},
		Ledger: ledgerOf{
			"a1": {st("claude-x", usage.Usage{Input: 10, Output: 5}, at, at.Add(time.Second))},
			"a2": {
				// Started in the window, settled after it.
				st("claude-x", usage.Usage{Input: 20, Output: 5}, hour.Add(59*time.Minute), hour.Add(61*time.Minute)),
				// Started before the window.
				st("claude-x", usage.Usage{Input: 99}, hour.Add(-time.Minute), hour.Add(time.Second)),
				st("gpt-x", usage.Usage{Input: 5, Output: 1}, at, at),
			},
		},
	}
	rep, err := r.Run(context.Background(), hour, hour.Add(time.Hour), vendorusage.Hour)
	if err != nil {
		t.Fatal(err)
	}
	rows := rep.Rows
	if len(rows) != 2 || len(paths) != 2+len(vendorusage.OpenAIOtherPaths()) {
		t.Fatalf("rows %+v from %v", rows, paths)
	}
	for _, row := range rows {
		if row.Unexplained != (Difference{}) || row.Entries == 0 || row.VendorKey != "k1" {
			t.Errorf("row %+v", row)
		}
	}
	if rows[0].Upstream != "alpha" || rows[0].Entries != 2 || rows[1].Upstream != "beta" {
		t.Errorf("rows %+v", rows)
	}
	if _, err := r.Run(context.Background(), hour, hour, vendorusage.Hour); err == nil {
		t.Error("an empty window ran")
	}
}

// A window of whole days reads the cost report too: the day's bill against
// the rows' usage at the ledger's prices, the rest unexplained.
func TestRunCosts(t *testing.T) {
	dayStart := hour.Truncate(24 * time.Hour)
	var costQuery string
	relay := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/beta" + vendorusage.OpenAIPath:
			w.Write([]byte(`{"object":"page","data":[{"start_time":1767348000,"end_time":1767351600,"results":[{"input_tokens":7,"output_tokens":1,"api_key_id":"key_b","model":"gpt-x"}]}],"has_more":false}`))
		case "/beta" + vendorusage.OpenAICostsPath:
			costQuery = r.URL.RawQuery
			// $0.000013: 2,000 nano-USD more than the usage at the ledger's prices.
			w.Write([]byte(`{"object":"page","data":[{"object":"bucket","start_time":1767312000,"end_time":1767398400,"results":[{"object":"organization.costs.result","amount":{"value":0.000013,"currency":"usd"}}]}],"has_more":false,"next_page":null}`))
		default:
			emptyOrNotFound(w, r)
		}
	}))
	defer relay.Close()
	at := hour.Add(30 * time.Minute)
	r := &Runner{
		Relay: relay.URL, Client: relay.Client(),
		Upstreams: []Upstream{{
			Name: "beta", Format: config.FormatChatCompletions, Keys: map[string]string{"k1": "key_b"},
			Serves: func(string) bool { return true }, Price: price, Costs: true,
		}},
		Ledger: ledgerOf{"a1": {{Settlement: account.Settlement{VendorKey: "k1", Priced: "gpt-x", StartedAt: at, EndedAt: at, Usage: usage.Usage{Input: 5, Output: 1}, Cost: 10_000}}}},
	}
	rep, err := r.Run(context.Background(), dayStart, dayStart.Add(24*time.Hour), vendorusage.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Rows) != 1 || rep.Rows[0].VendorCost != 12_000 || rep.Rows[0].Unexplained.Cost != 2000 {
		t.Fatalf("rows %+v", rep.Rows)
	}
	want := CostRow{Upstream: "beta", Start: dayStart, Billed: 13_000, Priced: 12_000, Unexplained: 1000}
	if len(rep.Costs) != 1 || rep.Costs[0] != want {
		t.Fatalf("costs %+v, want %+v (query %s)", rep.Costs, want, costQuery)
	}
	// An hour's window has no whole day: no cost report is read.
	costQuery = ""
	if rep, err = r.Run(context.Background(), hour, hour.Add(time.Hour), vendorusage.Hour); err != nil || len(rep.Costs) != 0 || costQuery != "" {
		t.Fatalf("an hour read costs %+v (%v)", rep.Costs, err)
	}
}

// emptyOrNotFound answers OpenAI's other usage reports with an empty page.
func emptyOrNotFound(w http.ResponseWriter, r *http.Request) {
	if strings.HasPrefix(r.URL.Path, "/beta/v1/organization/usage/") {
		w.Write([]byte(`{"data":[],"has_more":false}`))
		return
	}
	http.NotFound(w, r)
}
