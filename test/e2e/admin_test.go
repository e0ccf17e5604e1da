package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/modelgateway/gateway/internal/eventually"
	adminv1 "github.com/modelgateway/gateway/proto/gateway/admin/v1"
	"github.com/modelgateway/gateway/test/launch"
	"github.com/modelgateway/gateway/test/launch/launchtest"
)

const adminToken = "e2e-admin-token-5f1c0a7d"

// gatewayctl runs the real gatewayctl binary against one sidecar's admin API.
type gatewayctl struct {
	t   *testing.T
	bin string
	env []string
}

// adminCtl is gatewayctl pointed at s's admin API with the admin token,
// and env besides.
func adminCtl(t *testing.T, s *launch.Stack, env ...string) gatewayctl {
	return gatewayctl{t: t, bin: launchtest.Binary(t, "gatewayctl"), env: append([]string{
		"GATEWAY_ADMIN_ADDR=" + s.Config.Listeners.Admin,
		"GATEWAY_ADMIN_TOKEN=" + adminToken,
	}, env...)}
}

// run runs gatewayctl and returns its stdout, stderr and error.
func (c gatewayctl) run(args ...string) (string, string, error) {
	c.t.Helper()
	cmd := exec.Command(c.bin, args...)
	cmd.Env = append(os.Environ(), c.env...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	return out.String(), errOut.String(), err
}

// ok runs gatewayctl, which must succeed, and returns its stdout.
func (c gatewayctl) ok(args ...string) string {
	c.t.Helper()
	out, errOut, err := c.run(args...)
	if err != nil {
		c.t.Fatalf("gatewayctl %s: %v\n%s", strings.Join(args, " "), err, errOut)
	}
	return out
}

// json runs gatewayctl --json, which must succeed, and decodes its output.
func (c gatewayctl) json(args ...string) map[string]any {
	c.t.Helper()
	out := c.ok(append(args, "--json")...)
	var m map[string]any
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		c.t.Fatalf("gatewayctl %s: not JSON: %v\n%s", strings.Join(args, " "), err, out)
	}
	return m
}

// field reads a string at a dotted path of gatewayctl's JSON (protojson
// writes int64 values as strings too).
func field(t *testing.T, m map[string]any, path string) string {
	t.Helper()
	var cur any = m
	for _, p := range strings.Split(path, ".") {
		obj, ok := cur.(map[string]any)
		if !ok {
			t.Fatalf("%s: not an object at %q in %v", path, p, m)
		}
		cur = obj[p]
	}
	s, ok := cur.(string)
	if !ok {
		t.Fatalf("%s = %v (%T), want a string", path, cur, cur)
	}
	return s
}

// message posts a small the messages format request with key and returns the status and
// body.
func message(s *launch.Stack, key, model string) (int, string) {
	body := strings.Replace(string(messagesBody(false, "")), alphaModel, model, 1)
	resp, b := s.Do("POST", alphaPath, messagesHeaders(key), []byte(body))
	return resp.StatusCode, string(b)
}

// TestAdmin drives the admin API through the real gatewayctl against a
// sidecar, with a second sidecar (and Envoy) sharing the same Redis to show
// that revocation and expiry reach every sidecar within 5 seconds.
func TestAdmin(t *testing.T) {
	s := launchtest.Start(t, launch.Options{SidecarEnv: []string{"GATEWAY_ADMIN_TOKEN=" + adminToken}})
	s2 := launchtest.Start(t, launch.Options{RedisAddr: s.RedisAddr}) // no admin token
	ctl := adminCtl(t, s, "GATEWAY_ADMIN_ACTOR=e2e")
	var secrets []string // every secret made, to look for where none may be

	// Account, top-up (twice, one key), key and token.
	acct := ctl.json("accounts", "create", "--name", "acme", "--balance-usd", "1", "--daily-usd", "0", "--rpm", "0")
	id := field(t, acct, "account.id")
	for i, want := range []bool{true, false} {
		r := ctl.json("topup", id, "--usd", "2", "--idempotency-key", "invoice-1")
		if r["applied"] != want || field(t, r, "balance_nano_usd") != "3000000000" {
			t.Fatalf("top-up %d: %v; want applied %t and 3 USD", i+1, r, want)
		}
	}
	if b := field(t, ctl.json("accounts", "get", id), "account.balance_nano_usd"); b != "3000000000" {
		t.Fatalf("balance after two top-ups with one key: %s nano-USD, want 3 USD", b)
	}
	newKey := func(args ...string) (secret, keyID string) {
		t.Helper()
		r := ctl.json(append([]string{"keys", "create", id}, args...)...)
		secrets = append(secrets, field(t, r, "secret"))
		return field(t, r, "secret"), field(t, r, "key.id")
	}
	key, _ := newKey("--label", "ci")
	tr := ctl.json("tokens", "create", id, "--label", "dash")
	token, tokenID := field(t, tr, "secret"), field(t, tr, "token.id")
	secrets = append(secrets, token)

	t.Run("spend", func(t *testing.T) {
		if code, b := message(s, key, alphaModel); code != 200 {
			t.Fatalf("spend: %d %s", code, b)
		}
		eventually.That(t, 5*time.Second, "ledger entry", func() (bool, string) {
			l := ctl.json("ledger", id)
			entries, _ := l["entries"].([]any)
			return len(entries) == 1 && entries[0].(map[string]any)["cost_nano_usd"] != "0", fmt.Sprint(l)
		})
		bal := field(t, ctl.json("accounts", "get", id), "account.balance_nano_usd")
		if bal == "3000000000" {
			t.Fatal("the request was not charged")
		}
		if u := s.Usage(token, "day"); num(t, u, "balance_usd") >= 3 {
			t.Fatalf("usage: %v", u)
		}
	})

	t.Run("revoke reaches the second sidecar", func(t *testing.T) {
		victim, victimID := newKey("--label", "revoke-me")
		// Both sidecars have looked the key up, and cache it.
		for _, st := range []*launch.Stack{s, s2} {
			if code, b := message(st, victim, alphaModel); code != 200 {
				t.Fatalf("before revocation: %d %s", code, b)
			}
		}
		ctl.ok("keys", "revoke", id, victimID)
		for _, st := range []*launch.Stack{s2, s} {
			eventually.That(t, 5*time.Second, "revoked key refused", func() (bool, string) {
				code, b := message(st, victim, alphaModel)
				return code == 401 && strings.Contains(b, "revoked"), fmt.Sprint(code, " ", b)
			})
		}
		ctl.ok("tokens", "revoke", id, tokenID)
		eventually.That(t, 5*time.Second, "revoked token refused", func() (bool, string) {
			resp, b := s2.Do("GET", "/v1/usage", map[string]string{"Authorization": "Bearer " + token}, nil)
			return resp.StatusCode == 401, fmt.Sprint(resp.StatusCode, " ", string(b))
		})
	})

	t.Run("rotate", func(t *testing.T) {
		old, oldID := newKey("--label", "rotate-me")
		r := ctl.json("keys", "rotate", id, oldID, "--grace", "4s")
		fresh := field(t, r, "secret")
		secrets = append(secrets, fresh)
		for _, k := range []string{old, fresh} {
			if code, b := message(s2, k, alphaModel); code != 200 {
				t.Fatalf("during the grace period: %d %s", code, b)
			}
		}
		eventually.That(t, 4*time.Second+5*time.Second, "old key refused after the grace period", func() (bool, string) {
			code, b := message(s2, old, alphaModel)
			return code == 401 && strings.Contains(b, "expired"), fmt.Sprint(code, " ", b)
		})
		if code, b := message(s2, fresh, alphaModel); code != 200 {
			t.Fatalf("new key after the grace period: %d %s", code, b)
		}
	})

	t.Run("expiry", func(t *testing.T) {
		short, _ := newKey("--expires", "1s")
		eventually.That(t, 1*time.Second+5*time.Second, "expired key refused", func() (bool, string) {
			code, b := message(s2, short, alphaModel)
			return code == 401 && strings.Contains(b, "expired"), fmt.Sprint(code, " ", b)
		})
		code, b := message(s, short, alphaModel)
		checkError(t, alphaPath, code, "application/json", []byte(b), 401, "authentication_error", "")
	})

	t.Run("model allow-list", func(t *testing.T) {
		const allowedModel = "claude-haiku-4-5"
		narrow, _ := newKey("--models", allowedModel)
		if code, b := message(s, narrow, allowedModel); code != 200 {
			t.Fatalf("allowed model: %d %s", code, b)
		}
		resp, b := s.Do("POST", alphaPath, messagesHeaders(narrow), messagesBody(false, ""))
		checkError(t, alphaPath, resp.StatusCode, resp.Header.Get("content-type"), b, 403, "permission_error", "")
		resp, b = s.Do("POST", betaPath, chatCompletionsHeaders(narrow), chatCompletionsBody(false, false, ""))
		checkError(t, betaPath, resp.StatusCode, resp.Header.Get("content-type"), b, 403, "", "")
	})

	t.Run("audit", func(t *testing.T) {
		a := ctl.json("audit", "--all")
		entries, _ := a["entries"].([]any)
		seen := map[string]int{}
		for _, e := range entries {
			m := e.(map[string]any)
			if m["actor"] != "e2e" || m["account_id"] != id {
				t.Errorf("entry %v: want actor e2e and account %s", m, id)
			}
			seen[m["action"].(string)]++
		}
		for action, n := range map[string]int{"account.create": 1, "account.topup": 1, "key.create": 5,
			"token.create": 1, "key.revoke": 1, "token.revoke": 1, "key.rotate": 1} {
			if seen[action] != n {
				t.Errorf("%d %s entries, want %d (all: %v)", seen[action], action, n, seen)
			}
		}
	})

	t.Run("not through Envoy", func(t *testing.T) {
		resp, b := s.Do("POST", "/gateway.admin.v1.Admin/ListAccounts",
			map[string]string{"authorization": "Bearer " + adminToken}, nil)
		if resp.StatusCode != 404 {
			t.Fatalf("admin path through Envoy: %d %s, want 404", resp.StatusCode, b)
		}
		// Envoy answers a gRPC request's 404 in gRPC terms.
		resp, b = s.Do("POST", "/gateway.admin.v1.Admin/ListAccounts",
			map[string]string{"content-type": "application/grpc", "te": "trailers", "authorization": "Bearer " + adminToken}, nil)
		if g := resp.Header.Get("grpc-status"); resp.StatusCode != 404 && (g == "" || g == "0") {
			t.Fatalf("admin call as gRPC-over-HTTP through Envoy: %d grpc-status %q %s", resp.StatusCode, g, b)
		}
		conn, err := grpc.NewClient(s.Config.Listeners.Public, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+adminToken)
		_, err = adminv1.NewAdminClient(conn).ListAccounts(ctx, &adminv1.ListAccountsRequest{})
		if err == nil {
			t.Fatal("the admin API answered on Envoy's public listener")
		}
		if status.Code(err) != codes.Unimplemented {
			t.Logf("gRPC through Envoy fails with %v", err)
		}

		// A sidecar without an admin token serves no admin API.
		if !strings.Contains(s2.Sidecar.Log(), "admin API is not served") {
			t.Error("the sidecar without a token did not warn that the admin API is off")
		}
		other := gatewayctl{t: t, bin: ctl.bin, env: []string{"GATEWAY_ADMIN_ADDR=" + s2.Config.Listeners.Admin, "GATEWAY_ADMIN_TOKEN=" + adminToken}}
		if _, errOut, err := other.run("accounts", "list", "--timeout", "3s"); err == nil || !strings.Contains(errOut, "unreachable") {
			t.Errorf("admin API of the sidecar without a token: err %v, %s", err, errOut)
		}
		bad := gatewayctl{t: t, bin: ctl.bin, env: []string{"GATEWAY_ADMIN_ADDR=" + s.Config.Listeners.Admin, "GATEWAY_ADMIN_TOKEN=wrong"}}
		if _, errOut, err := bad.run("accounts", "list"); err == nil || !strings.Contains(errOut, "Unauthenticated") && !strings.Contains(errOut, "token") {
			t.Errorf("wrong token: err %v, %s", err, errOut)
		}
	})

	t.Run("no secret anywhere", func(t *testing.T) {
		if len(secrets) != 7 {
			t.Fatalf("%d secrets collected, want 7", len(secrets))
		}
		where := map[string]string{
			"sidecar log":        s.Sidecar.Log(),
			"second sidecar log": s2.Sidecar.Log(),
			"redis":              dumpRedis(t, s.RDB),
			"accounts list":      ctl.ok("accounts", "list") + ctl.ok("accounts", "list", "--json"),
			"keys list":          ctl.ok("keys", "list", id) + ctl.ok("keys", "list", id, "--json"),
			"audit":              ctl.ok("audit", "--all") + ctl.ok("audit", "--all", "--json"),
			"ledger":             ctl.ok("ledger", id) + ctl.ok("ledger", id, "--json"),
			"accounts get":       ctl.ok("accounts", "get", id, "--json"),
			"envoy log":          s.Envoy.Log(),
			"envoy access log":   readFile(t, filepath.Join(s.Dir, "envoy-access.log")),
		}
		for name, text := range where {
			if text == "" && name != "envoy log" { // Envoy logs warnings only
				t.Errorf("%s is empty: nothing was checked", name)
			}
			for _, sec := range secrets {
				// The random part alone too: it must not appear re-encoded
				// or with another prefix.
				if strings.Contains(text, sec) || strings.Contains(text, sec[3:]) {
					t.Errorf("%s contains the secret with prefix %s", name, sec[:8])
				}
			}
			if strings.Contains(text, adminToken) {
				t.Errorf("%s contains the admin token", name)
			}
		}
	})
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// dumpRedis returns every key of the database with its whole value,
// whatever its type.
func dumpRedis(t *testing.T, rdb redis.UniversalClient) string {
	t.Helper()
	ctx := context.Background()
	var b strings.Builder
	iter := rdb.Scan(ctx, 0, "*", 100).Iterator()
	n := 0
	for iter.Next(ctx) {
		k := iter.Val()
		n++
		typ, err := rdb.Type(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		var v any
		switch typ {
		case "string":
			v, err = rdb.Get(ctx, k).Result()
		case "hash":
			v, err = rdb.HGetAll(ctx, k).Result()
		case "set":
			v, err = rdb.SMembers(ctx, k).Result()
		case "zset":
			v, err = rdb.ZRangeWithScores(ctx, k, 0, -1).Result()
		case "list":
			v, err = rdb.LRange(ctx, k, 0, -1).Result()
		case "stream":
			v, err = rdb.XRange(ctx, k, "-", "+").Result()
		default:
			t.Fatalf("key %s has type %s, which the dump does not read", k, typ)
		}
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "%s %s %v\n", k, typ, v)
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Fatal("Redis is empty")
	}
	return b.String()
}
