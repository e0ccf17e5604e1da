package e2e

import (
	"strings"
	"testing"

	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/test/launch"
	"github.com/modelgateway/gateway/test/launch/launchtest"
)

type alphaError struct {
	Type  string `json:"type"`
	Error struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	} `json:"error"`
}

type betaError struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    string  `json:"code"`
	} `json:"error"`
}

// Every error the gateway produces is in the route's vendor format, with the
// type (messages format) or code (the chat-completions format) the vendor's SDKs map to the right
// exception.
func TestErrorsInVendorFormat(t *testing.T) {
	s := launchtest.Start(t, launch.Options{})
	acct := s.NewAccount(10, noLimits)
	poor := s.NewAccount(0, noLimits)
	limited := s.NewAccount(10, account.Limits{RPM: 1, WindowMinutes: 1})
	if resp, b := s.Do("POST", alphaPath, messagesHeaders(limited.Key), messagesBody(false, "")); resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}

	badModel := strings.Replace(string(messagesBody(false, "")), alphaModel, "no-such-model", 1)
	badBetaModel := strings.Replace(string(chatCompletionsBody(false, false, "")), betaModel, "no-such-model", 1)
	cases := []struct {
		name      string
		path      string
		header    map[string]string
		body      string
		status    int
		alphaType string
		betaCode  string
	}{
		{"no key", alphaPath, map[string]string{"content-type": "application/json"}, string(messagesBody(false, "")), 401, "authentication_error", ""},
		{"unknown key", alphaPath, messagesHeaders("cr_unknownunknownunknown"), string(messagesBody(false, "")), 401, "authentication_error", ""},
		{"read-only token", alphaPath, messagesHeaders(acct.ReadOnly), string(messagesBody(false, "")), 403, "permission_error", ""},
		{"malformed JSON", alphaPath, messagesHeaders(acct.Key), `{"model":`, 400, "invalid_request_error", ""},
		{"top-level array", alphaPath, messagesHeaders(acct.Key), `[1,2]`, 400, "invalid_request_error", ""},
		{"unknown model", alphaPath, messagesHeaders(acct.Key), badModel, 400, "invalid_request_error", ""},
		{"no balance", alphaPath, messagesHeaders(poor.Key), string(messagesBody(false, "")), 402, "billing_error", ""},
		{"unknown path", "/alpha/v1/nothing", messagesHeaders(acct.Key), "{}", 404, "not_found_error", ""},
		{"rate limited", alphaPath, messagesHeaders(limited.Key), string(messagesBody(false, "")), 429, "rate_limit_error", ""},

		{"no key", betaPath, map[string]string{"content-type": "application/json"}, string(chatCompletionsBody(false, false, "")), 401, "", "invalid_api_key"},
		{"unknown key", betaPath, chatCompletionsHeaders("cr_unknownunknownunknown"), string(chatCompletionsBody(false, false, "")), 401, "", "invalid_api_key"},
		{"read-only token", betaPath, chatCompletionsHeaders(acct.ReadOnly), string(chatCompletionsBody(false, false, "")), 403, "", ""},
		{"malformed JSON", betaPath, chatCompletionsHeaders(acct.Key), `{"model":`, 400, "", ""},
		{"unknown model", betaPath, chatCompletionsHeaders(acct.Key), badBetaModel, 400, "", "model_not_found"},
		{"no balance", betaPath, chatCompletionsHeaders(poor.Key), string(chatCompletionsBody(false, false, "")), 402, "", "insufficient_quota"},
		{"unknown path", "/beta/v1/nothing", chatCompletionsHeaders(acct.Key), "{}", 404, "", ""},
		{"rate limited", betaPath, chatCompletionsHeaders(limited.Key), string(chatCompletionsBody(false, false, "")), 429, "", "rate_limit_exceeded"},
	}
	for _, c := range cases {
		t.Run(c.path+" "+c.name, func(t *testing.T) {
			resp, b := s.Do("POST", c.path, c.header, []byte(c.body))
			checkError(t, c.path, resp.StatusCode, resp.Header.Get("content-type"), b, c.status, c.alphaType, c.betaCode)
		})
	}

	// Store unreachable: 503 with retry-after, fail closed.
	s.Redis.Stop()
	defer s.Redis.Start()
	for _, path := range []string{alphaPath, betaPath} {
		h, body := messagesHeaders(acct.Key), messagesBody(false, "")
		if path == betaPath {
			h, body = chatCompletionsHeaders(acct.Key), chatCompletionsBody(false, false, "")
		}
		resp, b := s.Do("POST", path, h, body)
		checkError(t, path, resp.StatusCode, resp.Header.Get("content-type"), b, 503, "overloaded_error", "")
		if resp.Header.Get("retry-after") == "" {
			t.Errorf("%s: 503 without retry-after", path)
		}
	}
}

func checkError(t *testing.T, path string, status int, contentType string, b []byte, wantStatus int, alphaType, betaCode string) {
	t.Helper()
	if status != wantStatus {
		t.Fatalf("status %d, want %d: %s", status, wantStatus, b)
	}
	if !strings.HasPrefix(contentType, "application/json") {
		t.Fatalf("content-type %q", contentType)
	}
	if strings.HasPrefix(path, "/alpha") {
		var e alphaError
		mustJSON(t, b, &e)
		if e.Type != "error" || e.Error.Message == "" || (alphaType != "" && e.Error.Type != alphaType) {
			t.Fatalf("the messages format error %s; want type %q", b, alphaType)
		}
		return
	}
	var e betaError
	mustJSON(t, b, &e)
	if e.Error.Message == "" || e.Error.Type == "" || (betaCode != "" && e.Error.Code != betaCode) {
		t.Fatalf("the chat-completions format error %s; want code %q", b, betaCode)
	}
}
