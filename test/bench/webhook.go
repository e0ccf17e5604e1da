package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/config"
	"github.com/modelgateway/gateway/internal/pricing"
	"github.com/modelgateway/gateway/test/launch"
)

// deadReceiver is a webhook receiver that is down in the harshest way, for
// -webhook-down: it accepts connections and never answers, so that every
// delivery attempt waits out the dispatcher's timeout while its workers
// and queue stay busy for the whole run.
type deadReceiver struct {
	addr     string
	accepted atomic.Int64
}

// alertAccounts is how many accounts have a balance alert crossed: as
// many events pending delivery.
const alertAccounts = 50

const webhookSecretEnv = "BENCH_WEBHOOK_SECRET"

func startDeadReceiver(tb *benchTB) *deadReceiver {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	r := &deadReceiver{addr: ln.Addr().String()}
	var mu sync.Mutex
	var held []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			r.accepted.Add(1)
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
		}
	}()
	tb.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			c.Close()
		}
	})
	return r
}

// configure points the gateway's alerts at the receiver; the watcher looks
// every 5 s so that the events fire early in the run.
func (r *deadReceiver) configure(c *config.Config) {
	c.Alerts.Interval = config.Duration(5 * time.Second)
	c.Alerts.Webhooks = []config.Webhook{{URL: "http://" + r.addr + "/hooks", SecretEnv: webhookSecretEnv}}
}

func (r *deadReceiver) env() string { return webhookSecretEnv + "=bench-signing-secret" }

// alertAccounts creates accounts whose balance is below their alert
// threshold: each fires balance.low once, and its delivery is retried
// against the receiver.
func (r *deadReceiver) alertAccounts(tb *benchTB, gw *launch.Stack) {
	for range alertAccounts {
		a := gw.NewAccount(1, account.Limits{})
		if err := gw.Store.SetBalanceAlert(context.Background(), a.ID, pricing.NanoUSD(2)); err != nil {
			tb.Fatal(err)
		}
	}
}

// status is what the sidecar's dispatcher did: its delivery attempts by
// result and the connections the receiver accepted.
func (r *deadReceiver) status(gw *launch.Stack) string {
	var results []string
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get(gw.ControlURL + "/metrics")
	if err == nil {
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			if rest, ok := strings.CutPrefix(sc.Text(), "gateway_webhook_deliveries_total{"); ok {
				results = append(results, rest)
			}
		}
	}
	return fmt.Sprintf("%d balance alerts fired, %d connections accepted and never answered, delivery attempts {%s", alertAccounts, r.accepted.Load(), strings.Join(results, ", {"))
}
