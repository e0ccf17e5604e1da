// Command fakevendor is a stand-in for both model vendors the gateway sits in
// front of. It serves one wire format on each of two listeners: messages
// (the Anthropic Messages API) and chat completions (the OpenAI Chat
// Completions API), so
// the gateway, its tests and its load tests can run without the network.
// A third listener, which the gateway never routes to, lets tests steer the
// fake and read back what it received.
//
// Usage:
//
//	fakevendor [-messages ADDR] [-chat-completions ADDR] [-control ADDR] [-name NAME]
//	           [-messages-key KEY] [-chat-completions-key KEY] [-addr-file PATH]
//	           [-messages-models IDS] [-chat-completions-models IDS]
//	           [-messages-admin-key KEY] [-chat-completions-admin-key KEY]
//	           [-max-records N] [-debug]
//
// The addresses default to 127.0.0.1:0; -addr-file receives
// {"messages":"host:port","chat_completions":"host:port","control":"host:port"},
// written atomically once all three are bound. The vendor credentials default
// to $FAKE_MESSAGES_KEY and $FAKE_CHAT_COMPLETIONS_KEY so that they need not
// appear on command lines; when set, messages wants "x-api-key: KEY" (or
// "Authorization: Bearer KEY", which recent official SDKs send) and chat
// completions "Authorization: Bearer KEY".
//
// # Vendor endpoints
//
// messages: POST /v1/messages (JSON or, with "stream":true, SSE),
// POST /v1/messages/count_tokens, GET /v1/models, GET /v1/models/{id}.
// chat completions: POST /v1/chat/completions (JSON or SSE), POST
// /v1/responses (JSON, SSE or background) with its stored responses (GET,
// DELETE, cancel, input_items), POST /v1/responses/input_tokens and
// /compact, POST /v1/embeddings (see responses.go), POST
// /v1/audio/transcriptions (multipart; JSON or SSE, see transcriptions.go), POST
// /v1/images/generations (JSON or SSE, see images.go), GET /v1/models,
// GET /v1/models/{id}. Anything else is a 404 in the vendor's error format.
// The usage reports (see adminusage.go): messages GET
// /v1/organizations/usage_report/messages (x-api-key: the admin key),
// chat completions GET /v1/organization/usage/completions (bearer admin
// key), grouped by api_key_id ("key_" and the key's label) and model, in
// 1m, 1h or 1d buckets, paged; they count every /v1/messages and
// /v1/chat/completions reply the fake generated (not yet the other
// endpoints').
// Every answer carries "x-fake-vendor: NAME" and a request id header
// (messages "request-id", chat completions "x-request-id"). Each SSE event is preceded by
// the comment ": sent_unix_nano=N", which SDKs ignore.
//
// Replies are deterministic (see reply.go): input tokens are
// ceil(len(body)/8); the text is "Echo:" and words of the last user message,
// reply_words words long, cut to max_tokens; output tokens are its word
// count, plus for chat completions the reasoning_tokens control (reported as reasoning
// tokens, not shown in the text).
//
// # Control endpoints
//
//	POST /control   {"format":"messages"|"chat_completions"|"", ...Controls}; absent
//	                fields are left unchanged; answers the controls of both
//	                ("probes_pass":true keeps a forced status off the probes)
//	GET  /control   {"messages":Controls,"chat_completions":Controls}
//	POST /reset     clear controls, records and counters
//	GET  /requests  records of received requests, oldest first
//	                (?format=messages&path=/v1/messages filter them)
//	GET  /stats     {"messages":N,"messages_probes":N,"messages_hung":N,"messages_in_flight":N,
//	                 "messages_peak_in_flight":N,"chat_completions":N,...} (peak: since the last reset)
//	                (hung: requests held by the hang control, never answered)
//	GET  /keys      {LABEL: {"requests":N,"forced":N,"cache_reads":N,"cache_writes":N}} per key,
//	                LABEL the first 8 hex digits of the key's SHA-256 (never the key)
//	POST /keys      {"key":LABEL,"status":429,"retry_after":"2"}: force a status on one
//	                key's API requests (status 0 clears it); -messages-key and
//	                -chat-completions-key take comma-separated lists (a pool)
//	POST /usage     {"format":"messages","key":LABEL,"model":ID,"input_tokens":N,"output_tokens":N,
//	                 "cache_read_tokens":N,...}: usage billed to the key that the gateway never
//	                sent (the key used directly), in the usage reports from now
//	GET  /healthz   200
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stderr, nil); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(2)
		}
		fmt.Fprintln(os.Stderr, "fakevendor:", err)
		os.Exit(1)
	}
}

// config is the parsed command line.
type config struct {
	messagesAddr, chatCompletionsAddr, controlAddr string
	name                                           string
	messagesKey, chatCompletionsKey                string
	messagesAdminKey, chatCompletionsAdminKey      string
	addrFile                                       string
	messagesModels, chatCompletionsModels          []string
	maxRecords                                     int
	debug                                          bool
}

func parseFlags(args []string, output io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("fakevendor", flag.ContinueOnError)
	fs.SetOutput(output)
	fs.StringVar(&c.messagesAddr, "messages", "127.0.0.1:0", "listen `address` of the messages API")
	fs.StringVar(&c.chatCompletionsAddr, "chat-completions", "127.0.0.1:0", "listen `address` of the chat completions API")
	fs.StringVar(&c.controlAddr, "control", "127.0.0.1:0", "listen `address` of the control API")
	fs.StringVar(&c.name, "name", "fake", "instance `name`, echoed in the x-fake-vendor header and in records")
	fs.StringVar(&c.messagesKey, "messages-key", os.Getenv("FAKE_MESSAGES_KEY"), "required messages x-api-key (default $FAKE_MESSAGES_KEY; empty: no check)")
	fs.StringVar(&c.chatCompletionsKey, "chat-completions-key", os.Getenv("FAKE_CHAT_COMPLETIONS_KEY"), "required chat completions bearer token (default $FAKE_CHAT_COMPLETIONS_KEY; empty: no check)")
	fs.StringVar(&c.messagesAdminKey, "messages-admin-key", os.Getenv("FAKE_MESSAGES_ADMIN_KEY"), "admin key of the messages usage report (default $FAKE_MESSAGES_ADMIN_KEY; empty: the report refuses every request)")
	fs.StringVar(&c.chatCompletionsAdminKey, "chat-completions-admin-key", os.Getenv("FAKE_CHAT_COMPLETIONS_ADMIN_KEY"), "admin key of the chat completions usage report (default $FAKE_CHAT_COMPLETIONS_ADMIN_KEY; empty: the report refuses every request)")
	fs.StringVar(&c.addrFile, "addr-file", "", "write the bound addresses as JSON to this `path` once listening")
	messagesModels := fs.String("messages-models", "claude-sonnet-4-5,claude-haiku-4-5", "comma-separated model ids listed by the messages API's GET /v1/models")
	chatCompletionsModels := fs.String("chat-completions-models", "gpt-4o,gpt-4o-mini", "comma-separated model ids listed by the chat completions API's GET /v1/models")
	fs.IntVar(&c.maxRecords, "max-records", 1000, "number of received requests kept for GET /requests")
	fs.BoolVar(&c.debug, "debug", false, "log every request (never bodies)")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	if c.maxRecords < 1 {
		return c, errors.New("-max-records must be at least 1")
	}
	c.messagesModels = splitList(*messagesModels)
	c.chatCompletionsModels = splitList(*chatCompletionsModels)
	return c, nil
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// addrs is the content of the -addr-file.
type addrs struct {
	Messages        string `json:"messages"`
	ChatCompletions string `json:"chat_completions"`
	Control         string `json:"control"`
}

// run serves until ctx is done. ready, when not nil, is called once every
// listener is bound and the address file (if any) is written; tests use it
// to wait for the fake without polling.
func run(ctx context.Context, args []string, logOut io.Writer, ready func(addrs)) error {
	cfg, err := parseFlags(args, logOut)
	if err != nil {
		return err
	}
	level := slog.LevelInfo
	if cfg.debug {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(logOut, &slog.HandlerOptions{Level: level})).With("fake", cfg.name)

	fake := newFake(cfg, log)

	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	for _, a := range []string{cfg.messagesAddr, cfg.chatCompletionsAddr, cfg.controlAddr} {
		ln, err := net.Listen("tcp", a)
		if err != nil {
			return err
		}
		lns = append(lns, ln)
	}
	bound := addrs{Messages: lns[0].Addr().String(), ChatCompletions: lns[1].Addr().String(), Control: lns[2].Addr().String()}
	if cfg.addrFile != "" {
		if err := writeAddrFile(cfg.addrFile, bound); err != nil {
			return err
		}
	}

	errLog := slog.NewLogLogger(log.Handler(), slog.LevelWarn)
	servers := []*http.Server{
		{Handler: fake.messages, ReadHeaderTimeout: 30 * time.Second, IdleTimeout: 2 * time.Minute, ErrorLog: errLog},
		{Handler: fake.chatCompletions, ReadHeaderTimeout: 30 * time.Second, IdleTimeout: 2 * time.Minute, ErrorLog: errLog},
		{Handler: fake.control, ReadHeaderTimeout: 30 * time.Second, IdleTimeout: 2 * time.Minute, ErrorLog: errLog},
	}
	errc := make(chan error, len(servers))
	for i, srv := range servers {
		ln := lns[i]
		go func() { errc <- srv.Serve(ln) }()
	}
	lns = nil // owned by the servers now
	log.Info("listening", "messages", bound.Messages, "chat_completions", bound.ChatCompletions, "control", bound.Control)
	if ready != nil {
		ready(bound)
	}

	select {
	case <-ctx.Done():
	case err = <-errc:
		log.Error("server failed", "err", err)
	}

	// Give in-flight streams a moment to finish, then cut them.
	shutCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, srv := range servers {
		if serr := srv.Shutdown(shutCtx); serr != nil {
			srv.Close()
		}
	}
	log.Info("stopped")
	return err
}

// writeAddrFile writes a to path atomically, so that a reader polling for the
// file never sees it half written.
func writeAddrFile(path string, a addrs) error {
	data, err := json.Marshal(a)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // no-op after a successful rename
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(append(data, '\n')); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
