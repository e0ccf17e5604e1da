package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/modelgateway/gateway/internal/audit"
	adminv1 "github.com/modelgateway/gateway/proto/gateway/admin/v1"
)

// Each change through the admin API is audited once with where it came
// from (the gRPC peer) and the state before and after it; a refusal
// recorded by a console carries no state and says refused.
func TestAuditBeforeAfter(t *testing.T) {
	e := newEnv(t)
	a := e.account(1e9)
	if _, err := e.client.SetLimits(e.ctx, &adminv1.SetLimitsRequest{AccountId: a.Id, Rpm: proto.Int64(7)}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.client.SuspendAccount(e.ctx, &adminv1.SuspendAccountRequest{AccountId: a.Id}); err != nil {
		t.Fatal(err)
	}
	secret, k := e.key(a.Id, &adminv1.CreateKeyRequest{Label: "ci"})
	if _, err := e.client.RevokeKey(e.ctx, &adminv1.RevokeKeyRequest{AccountId: a.Id, KeyId: k.Id}); err != nil {
		t.Fatal(err)
	}
	svc := New(e.st, Options{})
	svc.Refused(WithOrigin(WithActor(e.ctx, "sso:bill"), "10.1.2.3"), "POST /console/api/keys", a.Id, "")

	resp, err := e.client.ListAudit(e.ctx, &adminv1.ListAuditRequest{PageSize: 100})
	if err != nil {
		t.Fatal(err)
	}
	type state = map[string]any
	byAction := map[string][]*adminv1.AuditEntry{}
	for _, en := range resp.Entries {
		byAction[en.Action] = append(byAction[en.Action], en)
		if strings.Contains(en.Before+en.After+en.Detail, secret) || strings.Contains(en.Before+en.After, k.Prefix) && k.Prefix != "" {
			t.Errorf("%s holds the key's secret or prefix", en.Action)
		}
	}
	decode := func(s string) state {
		t.Helper()
		if s == "" {
			return nil
		}
		var m state
		if err := json.Unmarshal([]byte(s), &m); err != nil {
			t.Fatalf("%q: %v", s, err)
		}
		return m
	}
	for action, check := range map[string]func(en *adminv1.AuditEntry){
		"account.limits": func(en *adminv1.AuditEntry) {
			b, a := decode(en.Before)["limits"].(state), decode(en.After)["limits"].(state)
			if b["RPM"] != float64(defaultLimits.RPM) || a["RPM"] != float64(7) {
				t.Errorf("limits %v → %v", b, a)
			}
		},
		"account.suspend": func(en *adminv1.AuditEntry) {
			if decode(en.Before)["suspended"] != false || decode(en.After)["suspended"] != true {
				t.Errorf("suspend %s → %s", en.Before, en.After)
			}
		},
		"key.create": func(en *adminv1.AuditEntry) {
			if en.Before != "" || decode(en.After)["label"] != "ci" {
				t.Errorf("create %q → %s", en.Before, en.After)
			}
		},
		"key.revoke": func(en *adminv1.AuditEntry) {
			if decode(en.Before)["revoked"] != false || decode(en.After)["revoked"] != true {
				t.Errorf("revoke %s → %s", en.Before, en.After)
			}
		},
		"POST /console/api/keys": func(en *adminv1.AuditEntry) {
			if en.Outcome != audit.OutcomeRefused || en.Actor != "sso:bill" || en.Origin != "10.1.2.3" || en.Before != "" || en.After != "" {
				t.Errorf("refusal %+v", en)
			}
		},
	} {
		got := byAction[action]
		if len(got) != 1 {
			t.Errorf("%s audited %d times, want once", action, len(got))
			continue
		}
		check(got[0])
		if action != "POST /console/api/keys" && !strings.HasPrefix(got[0].Origin, "127.0.0.1:") {
			t.Errorf("%s from %q, want the gRPC peer", action, got[0].Origin)
		}
	}
}

// One actor pressing a forbidden route again and again writes one refused
// entry per minute to the shared trail, the next one counting those folded
// into it; another actor's, another action's and another account's
// refusals are written apart.
func TestRepeatedRefusalsFolded(t *testing.T) {
	e := newEnv(t)
	a, b := e.account(1e9), e.account(1e9)
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	svc := New(e.st, Options{Now: func() time.Time { return now }})
	bill := WithActor(e.ctx, "sso:bill")
	for range 50 {
		svc.Refused(bill, "POST /console/api/keys", a.Id, "")
	}
	svc.Refused(WithActor(e.ctx, "sso:eve"), "POST /console/api/keys", a.Id, "")
	svc.Refused(bill, "POST /console/limits", a.Id, "")
	svc.Refused(bill, "POST /console/api/keys", b.Id, "")
	now = now.Add(refusalEvery)
	svc.Refused(bill, "POST /console/api/keys", a.Id, "")

	resp, err := e.client.ListAudit(e.ctx, &adminv1.ListAuditRequest{PageSize: 100})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, en := range resp.Entries {
		if en.Outcome == audit.OutcomeRefused {
			got = append(got, en.Actor+" "+en.Action+" "+map[string]string{a.Id: "a", b.Id: "b"}[en.AccountId]+" "+en.Detail)
		}
	}
	slices.Sort(got)
	want := []string{
		"sso:bill POST /console/api/keys a ",
		"sso:bill POST /console/api/keys a and 49 more refused since the last entry",
		"sso:bill POST /console/api/keys b ",
		"sso:bill POST /console/limits a ",
		"sso:eve POST /console/api/keys a ",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("refused entries:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// lostTrail is an audit trail that loses every entry.
type lostTrail struct{}

func (lostTrail) AppendAudit(context.Context, audit.Entry) error { return errors.New("trail down") }
func (lostTrail) Audit(context.Context, string, int) ([]audit.Entry, string, error) {
	return nil, "", errors.New("trail down")
}

// A change whose audit entry is lost is made and answered all the same (a
// new key's secret cannot be shown again), and the loss is logged.
func TestLostAuditEntryIsLogged(t *testing.T) {
	e := newEnv(t)
	a := e.account(1e9)
	var logged bytes.Buffer
	svc := New(e.st, Options{Logger: slog.New(slog.NewTextHandler(&logged, nil))})
	svc.trail = lostTrail{}
	r, err := svc.CreateKey(e.ctx, &adminv1.CreateKeyRequest{AccountId: a.Id, Label: "ci"})
	if err != nil || r.Secret == "" {
		t.Fatalf("CreateKey = %v, %v; want the key despite the lost entry", r, err)
	}
	if !strings.Contains(logged.String(), "audit entry lost") || !strings.Contains(logged.String(), "key.create") {
		t.Errorf("log %q does not report the lost key.create entry", logged.String())
	}
}
