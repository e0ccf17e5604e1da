package main

import (
	"bytes"
	"context"
	"log"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"
)

// The socket phase: the Responses API's WebSocket transport on the
// gateway, against the floors' SSE streams of the same responses (the
// floors do not meter, so they have no socket of their own to compare
// with: the figure is what a socket message costs over an SSE event
// through bare Envoy). Each of a few sockets sends one response.create at
// a time (as the vendor allows), paced so that together they start as many
// responses a second as the SSE phases' streams; the fake stamps every
// message with "sent_unix_nano".

// socketCreate is the response.create each socket sends.
var socketCreate = []byte(`{"type":"response.create","model":"gpt-5.1-codex","max_output_tokens":256,"instructions":"Be brief.","input":"Hello there, gateway"}`)

// sentField starts every message of the fake's socket.
var sentField = []byte(`{"sent_unix_nano":`)

// socketPhase measures first event and per-message delivery on sockets.
func (b *bench) socketPhase() {
	p := b.plan
	if b.res.respStream.s[bareI] == nil {
		return
	}
	sockets := max(2, int(p.streamRate)/4)
	// Paced so that the sockets together start p.streamRate responses a
	// second, as many as the SSE phases' streams: the same load the floor's
	// figures were measured under.
	every := time.Duration(float64(sockets) / float64(p.streamRate) * float64(time.Second))
	log.Printf("socket: %d sockets, a response.create every %v on each, events %d ms apart", sockets, every, p.eventDelayMS)
	b.vendor(map[string]any{"event_delay_ms": p.eventDelayMS, "reply_words": p.replyWords})
	defer b.vendor(nil)
	key := b.gwT.header.Get("x-api-key")
	url := "ws" + strings.TrimPrefix(b.gwT.base, "http") + responsesPath
	socketLoad(url, key, sockets, every, p.warm)
	s := socketLoad(url, key, sockets, every, time.Duration(p.rounds)*p.slice)
	b.res.socket = streamResult{s: [nStacks]*streams{gwI: s, nullI: b.res.respStream.s[nullI], bareI: b.res.respStream.s[bareI]}}
}

// socketLoad runs sockets sockets for d, each starting a response every
// interval (open loop: the next starts on time, or at once when a
// response took longer), and returns what they measured: first event from
// sending the response.create, every message's delivery delay from the
// fake's stamp.
func socketLoad(url, key string, sockets int, every, d time.Duration) *streams {
	s := newStreams()
	deadline := time.Now().Add(d)
	var wg sync.WaitGroup
	for i := range sockets {
		wg.Add(1)
		go func() {
			// Staggered, so that the sockets' starts spread over interval.
			next := time.Now().Add(every * time.Duration(i) / time.Duration(sockets))
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), d+requestTimeout)
			defer cancel()
			c, _, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + key}}})
			if err != nil {
				s.record(streamTrace{}, err)
				return
			}
			defer c.CloseNow()
			c.SetReadLimit(-1)
			for time.Now().Before(deadline) {
				time.Sleep(time.Until(next)) // pacing the load, not synchronising
				next = next.Add(every)
				tr, err := socketResponse(ctx, c)
				s.record(tr, err)
				if err != nil {
					return
				}
			}
			c.Close(websocket.StatusNormalClosure, "")
		}()
	}
	wg.Wait()
	return s
}

// socketResponse sends one response.create and reads its messages to the
// terminal one.
func socketResponse(ctx context.Context, c *websocket.Conn) (streamTrace, error) {
	var tr streamTrace
	sent := time.Now()
	if err := c.Write(ctx, websocket.MessageText, socketCreate); err != nil {
		return tr, err
	}
	for {
		_, data, err := c.Read(ctx)
		now := time.Now()
		if err != nil {
			return tr, err
		}
		if tr.firstEvent == 0 {
			tr.firstEvent = now.Sub(sent)
			tr.headers = tr.firstEvent // no headers on a socket: the first message stands for them
		}
		if rest, ok := bytes.CutPrefix(data, sentField); ok {
			if i := bytes.IndexByte(rest, ','); i > 0 {
				if ns, perr := strconv.ParseInt(string(rest[:i]), 10, 64); perr == nil {
					tr.delays = append(tr.delays, max(time.Duration(now.UnixNano()-ns), 0))
				}
			}
		}
		if bytes.Contains(data, []byte(`"type":"response.completed"`)) || bytes.Contains(data, []byte(`"type":"error"`)) {
			if bytes.Contains(data, []byte(`"type":"error"`)) {
				return tr, &statusError{code: 0, body: string(data)}
			}
			return tr, nil
		}
	}
}
