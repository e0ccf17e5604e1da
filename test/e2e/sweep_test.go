package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelgateway/gateway/internal/config"
	"github.com/modelgateway/gateway/internal/eventually"
	"github.com/modelgateway/gateway/internal/ledger"
	"github.com/modelgateway/gateway/test/launch"
	"github.com/modelgateway/gateway/test/launch/launchtest"
)

// A sidecar killed (SIGKILL) after admitting a request and before its first
// checkpoint (the vendor has sent the 200 and is slow to its first token)
// leaves the request to another sidecar's sweeper. The sweeper settles it
// under the model it was priced as, with the client's alias as the requested
// name: the ledger and by_model never name the alias as a priced model.
func TestSweptRequestKeepsPricedModel(t *testing.T) {
	const (
		lease = 3 * time.Second
		alias = "house-sonnet"
	)
	s := launchtest.Start(t, launch.Options{Configure: func(c *config.Config) {
		c.Limits.HoldLease = config.Duration(lease)
		u, _ := c.Upstream("alpha")
		if u.Models.Aliases == nil {
			u.Models.Aliases = map[string]string{}
		}
		u.Models.Aliases[alias] = alphaModel
	}})
	for _, f := range []*launch.Fake{s.Primary, s.Reserve} {
		// The 200 at once, the first event long after the kill.
		f.Control(map[string]any{"first_event_delay_ms": 4 * lease.Milliseconds()})
	}
	acct := s.NewAccount(10, noLimits)
	ctx := context.Background()

	body := strings.Replace(string(messagesBody(true, "")), alphaModel, alias, 1)
	req, _ := http.NewRequest("POST", s.URL+alphaPath, strings.NewReader(body))
	for k, v := range messagesHeaders(acct.Key) {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}

	// Kill once the request is admitted: it holds its hold, and no
	// checkpoint yet.
	eventually.That(t, lease, "the request's hold", func() (bool, string) {
		n, _, err := s.Store.Store.OpenHolds(ctx, acct.ID)
		return err == nil && n == 1, fmt.Sprintf("%d holds, %v", n, err)
	})
	s.Sidecar.Signal(syscall.SIGKILL)
	if !s.Sidecar.Wait(10 * time.Second) {
		t.Fatal("the sidecar outlived SIGKILL")
	}
	if cs, err := s.Store.Checkpoints(ctx, acct.ID); err != nil || len(cs) != 0 {
		t.Fatalf("checkpoints %+v, %v: the request was checkpointed before the kill", cs, err)
	}

	// Another sidecar's sweeper settles the request once its lease ends.
	if err := s.StartSidecar(); err != nil {
		t.Fatal(err)
	}
	var entries []ledger.Entry
	eventually.That(t, 3*lease, "the sweeper's settlement", func() (bool, string) {
		entries = allLedgerEntries(t, s, acct.ID)
		return len(entries) == 1, fmt.Sprintf("%d ledger entries", len(entries))
	})
	e := entries[0]
	if !e.Interrupted || string(e.Requested) != alias || string(e.Priced) == alias || e.Priced == "" {
		t.Fatalf("swept entry: status %d, interrupted %v, requested %q, priced %q; want interrupted, %q, the catalogue's model",
			e.Status, e.Interrupted, e.Requested, e.Priced, alias)
	}
	rep, err := s.Store.Usage(ctx, acct.ID, ledger.Total)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range rep.ByModel {
		if string(m.Model) == alias {
			t.Fatalf("by_model has a row for the alias %s: %+v", alias, rep.ByModel)
		}
	}
}
