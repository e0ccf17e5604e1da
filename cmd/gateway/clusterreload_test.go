package main

import (
	"context"
	"fmt"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// A connection error asks for a slot map reload, at most once per gap;
// Redis replies and a caller giving up do not.
func TestReloadHookOnConnectionErrors(t *testing.T) {
	now := time.Unix(1000, 0)
	reloads := 0
	h := &reloadHook{reload: func() { reloads++ }, minGap: 250 * time.Millisecond, now: func() time.Time { return now }}
	var fail error
	process := h.ProcessHook(func(context.Context, redis.Cmder) error { return fail })
	pipeline := h.ProcessPipelineHook(func(context.Context, []redis.Cmder) error { return fail })
	run := func(err error) {
		fail = err
		process(context.Background(), redis.NewCmd(context.Background(), "get", "k"))
	}

	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	for _, err := range []error{nil, redis.Nil, replyError("ERR script failed"), context.Canceled, fmt.Errorf("wrapped: %w", redis.Nil)} {
		run(err)
	}
	if reloads != 0 {
		t.Fatalf("%d reloads after replies and cancellations; want 0", reloads)
	}
	run(refused)
	if reloads != 1 {
		t.Fatalf("%d reloads after a refused dial; want 1", reloads)
	}
	now = now.Add(100 * time.Millisecond)
	run(refused)
	fail = context.DeadlineExceeded
	pipeline(context.Background(), nil)
	if reloads != 1 {
		t.Fatalf("%d reloads within the gap; want 1", reloads)
	}
	now = now.Add(150 * time.Millisecond)
	pipeline(context.Background(), nil)
	if reloads != 2 {
		t.Fatalf("%d reloads after the gap; want 2", reloads)
	}
}

// replyError is an error reply of the server, as go-redis types them.
type replyError string

func (e replyError) Error() string { return string(e) }
func (replyError) RedisError()     {}
