package e2e

import (
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

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

// The operator console's sessions are every sidecar's: signed in through
// one sidecar on one Redis, the person is signed in on the other, makes a
// change there with the same CSRF token, and sees its notice on the next
// page; signed out on the second, the session is gone from the first;
// the first restarted, a session started before is still signed in.
func TestConsoleSessionAcrossSidecars(t *testing.T) {
	env := []string{"GATEWAY_ADMIN_TOKEN=" + adminToken}
	a := launchtest.Start(t, launch.Options{SidecarEnv: env})
	b := launchtest.Start(t, launch.Options{RedisAddr: a.RedisAddr, SidecarEnv: env})
	jar, _ := cookiejar.New(nil)
	client := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	// One browser: the jar's cookies for one console go to the other.
	carry := func(from, to *launch.Stack) {
		f, _ := url.Parse("http://" + from.Config.Listeners.Console + "/")
		u, _ := url.Parse("http://" + to.Config.Listeners.Console + "/")
		jar.SetCookies(u, jar.Cookies(f))
	}
	csrf := regexp.MustCompile(`name="csrf" value="([^"]+)"`)
	get := func(s *launch.Stack, path string) (int, string) {
		t.Helper()
		resp, err := client.Get("http://" + s.Config.Listeners.Console + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	post := func(s *launch.Stack, path string, form url.Values) *http.Response {
		t.Helper()
		req, _ := http.NewRequest("POST", "http://"+s.Config.Listeners.Console+path, strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", "http://"+s.Config.Listeners.Console)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	if resp := post(a, "/signin", url.Values{"token": {adminToken}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign-in on the first sidecar: %d", resp.StatusCode)
	}
	code, page := get(a, "/")
	m := csrf.FindStringSubmatch(page)
	if code != http.StatusOK || m == nil {
		t.Fatalf("the first sidecar's page: %d", code)
	}
	carry(a, b)
	code, page = get(b, "/")
	if n := csrf.FindStringSubmatch(page); code != http.StatusOK || n == nil || n[1] != m[1] {
		t.Fatalf("the second sidecar's page: %d, CSRF token %v, want the first's", code, n)
	}
	resp := post(b, "/accounts", url.Values{"name": {"made on b"}, "balance_usd": {"1"}, "csrf": {m[1]}})
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("a change on the second sidecar: %d", resp.StatusCode)
	}
	carry(b, a)
	if code, page := get(a, resp.Header.Get("Location")); code != http.StatusOK || !strings.Contains(page, "Account created.") {
		t.Fatalf("the next page, from the first sidecar: %d, notice shown: %v", code, strings.Contains(page, "Account created."))
	}
	a.Sidecar.Signal(syscall.SIGKILL)
	if !a.Sidecar.Wait(10 * time.Second) {
		t.Fatal("sidecar survived SIGKILL")
	}
	if err := a.StartSidecar(); err != nil {
		t.Fatal(err)
	}
	if code, _ := get(a, "/"); code != http.StatusOK {
		t.Fatalf("after the first sidecar's restart: %d, want still signed in", code)
	}
	carry(a, b)
	if resp := post(b, "/signout", url.Values{"csrf": {m[1]}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign-out on the second sidecar: %d", resp.StatusCode)
	}
	// The browser drops its cookie; one kept (stolen) is refused too.
	if code, _ := get(a, "/"); code != http.StatusSeeOther {
		t.Fatalf("signed out on the second sidecar, the first answers %d", code)
	}
}
