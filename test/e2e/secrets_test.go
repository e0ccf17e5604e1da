package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelgateway/gateway/internal/eventually"
	"github.com/modelgateway/gateway/test/launch"
	"github.com/modelgateway/gateway/test/launch/launchtest"
)

// A sentinel sent inside the prompt, the tool definitions and a key appears
// in no sidecar log, no Envoy log or access log, and no Redis value; nor do
// the secrets of real keys and tokens.
func TestNoBodiesOrSecretsAreKept(t *testing.T) {
	s := launchtest.Start(t, launch.Options{})
	acct := s.NewAccount(10, noLimits)
	const sentinel = "SENTINEL7f3a9c"

	tools := `,"tools":[{"name":"lookup","description":"` + sentinel + `","input_schema":{"type":"object","properties":{"q":{"type":"string","description":"` + sentinel + `"}}}}]`
	prompt := strings.Replace(string(messagesBody(false, tools)), "Hello there, gateway", "Hello "+sentinel, 1)
	if resp, b := s.Do("POST", alphaPath, messagesHeaders(acct.Key), []byte(prompt)); resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	_, evs := stream(t, s, betaPath, chatCompletionsHeaders(acct.Key), []byte(strings.Replace(string(chatCompletionsBody(true, false, "")), "Hello there, gateway", sentinel, 1)))
	if len(evs) == 0 {
		t.Fatal("no stream")
	}
	// A key that carries the sentinel, and one in a query string.
	s.Do("POST", alphaPath, messagesHeaders("cr_"+sentinel+"xxxxxxxx"), []byte(prompt))
	s.Do("POST", alphaPath+"?key=cr_"+sentinel, messagesHeaders(acct.Key), []byte(prompt))
	s.Do("GET", "/v1/usage", map[string]string{"Authorization": "Bearer ro_" + sentinel + "yyyyyyyy"}, nil)
	s.Usage(acct.ReadOnly, "day")

	forbidden := []string{sentinel, acct.Key, acct.ReadOnly, launch.AlphaVendorKey, launch.BetaVendorKey}
	// Envoy flushes its access log about once a second: wait for the line of
	// the last request.
	var access string
	eventually.True(t, 20*time.Second, "both /v1/usage requests in Envoy's access log", func() bool {
		b, _ := os.ReadFile(filepath.Join(s.Dir, "envoy-access.log"))
		access = string(b)
		return strings.Count(access, "/v1/usage") >= 2
	})
	logs := map[string]string{"sidecar log": s.Sidecar.Log(), "envoy log": s.Envoy.Log(), "envoy access log": access}
	if !strings.Contains(logs["envoy access log"], alphaPath) || !strings.Contains(logs["sidecar log"], `"msg":"request"`) {
		t.Fatal("the logs are empty: the test would prove nothing")
	}
	for name, text := range logs {
		for _, f := range forbidden {
			if strings.Contains(text, f) {
				t.Errorf("%s contains %q", name, f[:min(len(f), 12)])
			}
		}
	}
	for _, f := range forbidden {
		if where := findInRedis(t, s, f); where != "" {
			t.Errorf("Redis key %s holds %q", where, f[:min(len(f), 12)])
		}
	}
}

// findInRedis scans every key and every value of every type for s.
func findInRedis(t *testing.T, st *launch.Stack, needle string) string {
	t.Helper()
	ctx := context.Background()
	rdb := st.RDB
	keys, err := rdb.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		var vals []string
		switch typ, _ := rdb.Type(ctx, k).Result(); typ {
		case "string":
			v, _ := rdb.Get(ctx, k).Result()
			vals = []string{v}
		case "hash":
			m, _ := rdb.HGetAll(ctx, k).Result()
			for f, v := range m {
				vals = append(vals, f, v)
			}
		case "set":
			vals, _ = rdb.SMembers(ctx, k).Result()
		case "zset":
			vals, _ = rdb.ZRange(ctx, k, 0, -1).Result()
		case "list":
			vals, _ = rdb.LRange(ctx, k, 0, -1).Result()
		case "stream":
			msgs, _ := rdb.XRange(ctx, k, "-", "+").Result()
			for _, m := range msgs {
				for f, v := range m.Values {
					vals = append(vals, f, toString(v))
				}
			}
		}
		for _, v := range append(vals, k) {
			if strings.Contains(v, needle) {
				return k
			}
		}
	}
	return ""
}

func toString(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	return ""
}
