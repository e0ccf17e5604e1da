package e2e

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/modelgateway/gateway/test/launch"
	"github.com/modelgateway/gateway/test/launch/launchtest"
)

// The operator console's sign-in limit holds across sidecars: failed
// sign-ins from one address spread over two sidecars on one Redis reach
// the limit at the same total (5 a minute) as on one sidecar, and then
// both refuse, the right token included, with a Retry-After.
func TestConsoleSignInLimitAcrossSidecars(t *testing.T) {
	env := []string{"GATEWAY_ADMIN_TOKEN=" + adminToken}
	a := launchtest.Start(t, launch.Options{SidecarEnv: env})
	b := launchtest.Start(t, launch.Options{RedisAddr: a.RedisAddr, SidecarEnv: env})
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	signIn := func(s *launch.Stack, token string) *http.Response {
		t.Helper()
		resp, err := client.PostForm("http://"+s.Config.Listeners.Console+"/signin", url.Values{"token": {token}})
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	consoles := []*launch.Stack{a, b}
	const limit = 5 // per client address and minute
	for i := range limit {
		if resp := signIn(consoles[i%2], "wrong-"+strconv.Itoa(i)); resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("failed sign-in %d on sidecar %d: %d", i+1, i%2, resp.StatusCode)
		}
	}
	for i, s := range consoles {
		resp := signIn(s, adminToken)
		wait, err := strconv.Atoi(resp.Header.Get("Retry-After"))
		if resp.StatusCode != http.StatusTooManyRequests || err != nil || wait < 1 || wait > 61 {
			t.Fatalf("sign-in %d on sidecar %d: %d, Retry-After %q; want 429 within a minute", limit+1+i, i, resp.StatusCode, resp.Header.Get("Retry-After"))
		}
		for _, c := range resp.Cookies() {
			if strings.HasPrefix(c.Name, "gateway_") {
				t.Fatalf("a session cookie over the limit: %s", c.Name)
			}
		}
	}
}
