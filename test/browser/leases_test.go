package browser

import (
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/config"
	"github.com/modelgateway/gateway/internal/eventually"
	"github.com/modelgateway/gateway/internal/pricing"
	"github.com/modelgateway/gateway/test/launch"
	"github.com/modelgateway/gateway/test/launch/launchtest"
)

// With limits.leases on, the customer page and the operator console show
// what the sidecar's lease sets aside of the balance beside what requests
// in flight hold.
func TestConsolesShowLeased(t *testing.T) {
	s := launchtest.Start(t, launch.Options{
		SidecarEnv: []string{"GATEWAY_ADMIN_TOKEN=" + adminToken},
		Configure: func(c *config.Config) {
			c.Limits.Leases = "on"
			// Renewals far apart, so that the lease keeps its size while
			// the pages are read (a renewal in between is retried below).
			c.Limits.LeaseInterval = config.Duration(20 * time.Second)
		},
	})
	a := s.NewAccount(20, account.Limits{})
	eventually.True(t, 10*time.Second, "a lease taken for the account", func() bool {
		if resp, body := alphaRequest(s, a.Key); resp.StatusCode != 200 {
			t.Fatalf("model request: %d %s", resp.StatusCode, body)
		}
		return s.Leased(a.ID) > 0
	})
	s.WaitSettled()
	br := newBrowser(t)

	// seen reads the page with read and the lease before and after it,
	// until no renewal came in between; it returns the page's text and the
	// lease it showed.
	seen := func(what string, read func() string) (string, int64) {
		var text string
		var amount int64
		eventually.True(t, 30*time.Second, what+" read between renewals", func() bool {
			amount = s.Leased(a.ID)
			text = read()
			return s.Leased(a.ID) == amount
		})
		if amount <= 0 {
			t.Fatalf("%s: no lease", what)
		}
		return text, amount
	}

	t.Run("customer", func(t *testing.T) {
		tb := newTab(t, br)
		tb.do(chromedp.Navigate(s.URL+"/console/"), chromedp.WaitVisible("#token"),
			chromedp.SendKeys("#token", a.ReadOnly), chromedp.Click(`#signin button[type="submit"]`), chromedp.WaitVisible(`body[data-loaded="true"]`))
		var rows [][]string
		_, amount := seen("the customer page", func() string {
			// The credential is in the tab's session storage: a reload
			// reads /v1/usage again.
			tb.do(chromedp.Reload(), chromedp.WaitVisible(`body[data-loaded="true"]`))
			rows = tb.rows("#limits")
			return ""
		})
		lim := s.Usage(a.ReadOnly, "day")["limits"].(map[string]any)
		if got := pricing.NanoUSD(lim["leased_usd"].(float64)); got != amount {
			t.Errorf("/v1/usage leased_usd %v, Redis %d", lim["leased_usd"], amount)
		}
		held := -1
		for i, r := range rows {
			if r[0] == "Held for requests in flight (USD)" {
				held = i
			}
		}
		if held < 0 || held+1 >= len(rows) {
			t.Fatalf("no held row followed by another in the limits: %q", rows)
		}
		if r, want := rows[held+1], []string{"Leased for requests to come (USD)", "$" + pricing.FormatUSD(amount)}; r[0] != want[0] || r[1] != want[1] {
			t.Errorf("the row after held: %q, want %q", r, want)
		}
		tb.screenshots("customer-leased")
		tb.clean()
	})

	t.Run("operator", func(t *testing.T) {
		base := "http://" + s.Config.Listeners.Console
		tb := newTab(t, br)
		tb.do(chromedp.Navigate(base+"/"), chromedp.WaitVisible("#token"),
			chromedp.SendKeys("#token", adminToken), chromedp.Click(`main button[type="submit"]`), chromedp.WaitVisible("#accounts"))
		var held string
		shown, amount := seen("the operator's account page", func() string {
			tb.do(chromedp.Navigate(base+"/accounts/"+a.ID), chromedp.WaitVisible("#leased"))
			held = tb.text("#held")
			return tb.text("#leased")
		})
		if want := "$" + pricing.FormatUSD(amount); shown != want {
			t.Errorf("leased %q, want %q", shown, want)
		}
		// Held is in the card before it (nothing is in flight now).
		if want := "$" + pricing.FormatUSD(0); held != want {
			t.Errorf("held %q, want %q", held, want)
		}
		if !eval[bool](tb, `document.getElementById("held").closest(".card").nextElementSibling.contains(document.getElementById("leased"))`) {
			t.Errorf("leased is not beside held: %q", tb.text("dl.cards"))
		}
		tb.screenshots("operator-leased")
		tb.clean()
	})
}
