package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"
)

// TestRun starts the real listeners on port 0 and checks the address file.
func TestRun(t *testing.T) {
	t.Setenv("FAKE_MESSAGES_KEY", "from-env")
	t.Setenv("FAKE_CHAT_COMPLETIONS_KEY", "")
	addrFile := filepath.Join(t.TempDir(), "addrs.json")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready := make(chan addrs, 1)
	done := make(chan error, 1)
	var logs bytes.Buffer
	go func() {
		done <- run(ctx, []string{"-name", "reserve", "-addr-file", addrFile}, &logs, func(a addrs) { ready <- a })
	}()
	var bound addrs
	select {
	case bound = <-ready:
	case err := <-done:
		t.Fatalf("run: %v", err)
	}

	data, err := os.ReadFile(addrFile)
	if err != nil {
		t.Fatal(err)
	}
	var inFile addrs
	if err := json.Unmarshal(data, &inFile); err != nil {
		t.Fatalf("addr file %s: %v", data, err)
	}
	if inFile != bound || inFile.Messages == "" || inFile.ChatCompletions == "" || inFile.Control == "" {
		t.Errorf("addr file %+v, bound %+v", inFile, bound)
	}
	if matches, _ := filepath.Glob(filepath.Join(filepath.Dir(addrFile), ".*tmp*")); len(matches) != 0 {
		t.Errorf("temporary files left: %v", matches)
	}

	get := func(url string, header ...string) (int, string) {
		req, _ := http.NewRequest("GET", url, nil)
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header.Get("X-Fake-Vendor") + " " + string(b)
	}
	if code, _ := get("http://" + bound.Control + "/healthz"); code != 200 {
		t.Errorf("healthz %d", code)
	}
	// The messages key came from the environment; the chat completions one is off.
	if code, body := get("http://" + bound.Messages + "/v1/models"); code != 401 {
		t.Errorf("messages without key: %d %s", code, body)
	}
	if code, body := get("http://"+bound.Messages+"/v1/models", "X-Api-Key", "from-env"); code != 200 || body[:8] != "reserve " {
		t.Errorf("messages with key: %d %s", code, body)
	}
	if code, body := get("http://" + bound.ChatCompletions + "/v1/models"); code != 200 {
		t.Errorf("chat completions: %d %s", code, body)
	}

	cancel()
	if err := <-done; err != nil {
		t.Errorf("run returned %v", err)
	}
	if bytes.Contains(logs.Bytes(), []byte("from-env")) {
		t.Errorf("the log shows a key: %s", logs.Bytes())
	}
}

func TestFlags(t *testing.T) {
	t.Setenv("FAKE_MESSAGES_KEY", "a")
	t.Setenv("FAKE_CHAT_COMPLETIONS_KEY", "b")
	cfg, err := parseFlags([]string{"-chat-completions-key", "flag", "-messages-models", " x, y ,"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.messagesKey != "a" || cfg.chatCompletionsKey != "flag" || len(cfg.messagesModels) != 2 || cfg.messagesModels[1] != "y" ||
		cfg.messagesAddr != "127.0.0.1:0" || cfg.maxRecords != 1000 {
		t.Errorf("config %+v", cfg)
	}
	if _, err := parseFlags([]string{"extra"}, io.Discard); err == nil {
		t.Error("stray argument accepted")
	}
}
