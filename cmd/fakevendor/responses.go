package main

import (
	"cmp"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The chat completions vendor's Responses API (POST /v1/responses and the paths of
// stored responses) and Embeddings API (POST /v1/embeddings).
//
// Replies follow the same deterministic plan as chat completions (see
// reply.go). Usage: input_tokens is the planned input plus cache reads
// (which it includes, as the vendor's does), output_tokens the visible
// output plus the reasoning tokens. Output items, in order: a reasoning
// item when reasoning_tokens is set, web_search_requests web_search_call
// items, the other built-in tools' calls the controls ask for
// (file_search_calls, code_interpreter_calls in code_interpreter_containers
// containers, image_generation_calls), then a function_call (tool_call control, a function tool offered)
// or the text message. A reply cut by max_output_tokens ends "incomplete";
// the fail_response control makes it end "failed" with its input billed
// and no output. Stored responses (store not false) can be read back,
// streamed again, listed for their input, cancelled and deleted; a
// background response is in progress for background_polls retrievals
// (default 1), then completed.

// storedResponse is one response the fake keeps, encoded: a bench run
// stores thousands, and kept as maps and a slice per event each was
// hundreds of objects for every garbage collection to mark.
type storedResponse struct {
	final      []byte // the response as it ends, JSON
	input      []any  // its input items
	background bool
	pending    int    // retrievals left that see it in progress
	events     []byte // its stream's events, one after the other
	ends       []int  // where each event ends in events
	// owner is the API key that created it: as at the vendor, where a
	// stored response is its project's, another key reads 404.
	owner string
}

func newStoredResponse(final map[string]any, events [][]byte) *storedResponse {
	n := 0
	for _, ev := range events {
		n += len(ev)
	}
	sr := &storedResponse{final: appendJSON(nil, final), events: make([]byte, 0, n), ends: make([]int, len(events))}
	for i, ev := range events {
		sr.events = append(sr.events, ev...)
		sr.ends[i] = len(sr.events)
	}
	return sr
}

// response is the final response, decoded.
func (sr *storedResponse) response() map[string]any {
	var m map[string]any
	if err := json.Unmarshal(sr.final, &m); err != nil {
		panic(err) // the fake's own encoding: a bug
	}
	return m
}

// event is its stream's event i.
func (sr *storedResponse) event(i int) []byte {
	start := 0
	if i > 0 {
		start = sr.ends[i-1]
	}
	return sr.events[start:sr.ends[i]]
}

// readBy reports whether key may read the response (or continue it).
func (sr *storedResponse) readBy(key string) bool { return sr.owner == "" || sr.owner == key }

// responseStore holds stored responses by id.
type responseStore struct {
	mu sync.Mutex
	m  map[string]*storedResponse
}

func (s *responseStore) get(id string) (*storedResponse, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.m[id]
	return r, ok
}

func (s *responseStore) put(id string, r *storedResponse) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[string]*storedResponse{}
	}
	s.m[id] = r
}

func (s *responseStore) remove(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.m[id]
	delete(s.m, id)
	return ok
}

// respRequest is the part of a create request the fake looks at.
type respRequest struct {
	Model              string          `json:"model"`
	Input              json.RawMessage `json:"input"`
	Instructions       *string         `json:"instructions"`
	Stream             bool            `json:"stream"`
	Background         bool            `json:"background"`
	Store              *bool           `json:"store"`
	MaxOutputTokens    int             `json:"max_output_tokens"`
	PreviousResponseID string          `json:"previous_response_id"`
	Tools              []struct {
		Type       string          `json:"type"`
		Name       string          `json:"name"`
		Parameters json.RawMessage `json:"parameters"`
	} `json:"tools"`
}

// inputItems returns the request's input as items, a string input being
// one user message.
func inputItems(raw json.RawMessage) []any {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []any{map[string]any{"type": "message", "role": "user", "content": []any{map[string]any{"type": "input_text", "text": s}}}}
	}
	var items []any
	json.Unmarshal(raw, &items)
	return items
}

// inputMessages converts input items into the messages lastTurn reads: a
// function_call_output is a tool result.
func inputMessages(raw json.RawMessage) []message {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []message{{Role: "user", Content: raw}}
	}
	var items []struct {
		Type    string          `json:"type"`
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
		Output  json.RawMessage `json:"output"`
	}
	json.Unmarshal(raw, &items)
	var out []message
	for _, it := range items {
		switch {
		case it.Type == "function_call_output":
			out = append(out, message{Role: "tool", Content: it.Output})
		case it.Role != "":
			out = append(out, message{Role: it.Role, Content: it.Content})
		}
	}
	return out
}

// responseUsage is the usage object of a response.
func (rp *reply) responseUsage() map[string]any {
	in := rp.inputTokens + rp.cacheRead
	out := rp.outputTokens + rp.reasoningTokens
	return map[string]any{
		"input_tokens":          in,
		"input_tokens_details":  map[string]any{"cached_tokens": rp.cacheRead},
		"output_tokens":         out,
		"output_tokens_details": map[string]any{"reasoning_tokens": rp.reasoningTokens},
		"total_tokens":          in + out,
	}
}

// responses serves POST /v1/responses.
func (b *chatAPI) responses(w http.ResponseWriter, r *http.Request, body []byte, ctl *Controls) {
	var req respRequest
	if err := json.Unmarshal(body, &req); err != nil {
		b.writeError(w, r, http.StatusBadRequest, "We could not parse the JSON body of your request: "+err.Error())
		return
	}
	if req.Model == "" {
		b.writeError(w, r, http.StatusBadRequest, "Missing required parameter: 'model'.")
		return
	}
	if req.PreviousResponseID != "" {
		if prev, ok := b.stored.get(req.PreviousResponseID); !ok || !prev.readBy(requestKey(r)) {
			b.writeError(w, r, http.StatusNotFound, "Previous response with id '"+req.PreviousResponseID+"' not found.")
			return
		}
	}
	store := req.Store == nil || *req.Store
	if req.Background && !store {
		b.writeError(w, r, http.StatusBadRequest, "Background responses require store=true.")
		return
	}
	var tool *toolCall
	for _, t := range req.Tools {
		if t.Type == "function" && t.Name != "" {
			tool = &toolCall{name: t.Name, arguments: toolArguments(t.Parameters)}
			break
		}
	}
	rp := planReply(body, inputMessages(req.Input), req.MaxOutputTokens, tool, ctl)
	b.fake.chatCompletionsUsage.bill(r, req.Model, rp.billed())
	id := b.fake.ids.next("resp_")
	final, events := b.buildResponse(&req, rp, id, ctl, store)
	if store {
		pending := 0
		if req.Background {
			pending = cmp.Or(ctl.BackgroundPolls, 1)
		}
		sr := newStoredResponse(final, events)
		sr.input, sr.background, sr.pending, sr.owner = inputItems(req.Input), req.Background, pending, requestKey(r)
		b.stored.put(id, sr)
	}
	switch {
	case req.Stream:
		s := startSSE(w, r, ctl)
		defer s.release()
		for _, ev := range events {
			s.event(eventType(ev), ev)
		}
	case req.Background:
		queued := snapshot(final, "queued")
		writeJSON(w, http.StatusOK, queued)
	default:
		writeJSON(w, http.StatusOK, final)
	}
}

// eventType reads the type of an encoded event.
func eventType(ev []byte) string {
	var t struct {
		Type string `json:"type"`
	}
	json.Unmarshal(ev, &t)
	return t.Type
}

// snapshot is the response as it stands before its end: the given status,
// no output, no usage.
func snapshot(final map[string]any, status string) map[string]any {
	s := make(map[string]any, len(final))
	for k, v := range final {
		s[k] = v
	}
	s["status"], s["output"], s["usage"], s["incomplete_details"], s["error"] = status, []any{}, nil, nil, nil
	return s
}

// buildResponse plans the final response object and the events that
// stream it.
func (b *chatAPI) buildResponse(req *respRequest, rp *reply, id string, ctl *Controls, store bool) (map[string]any, [][]byte) {
	ids := &b.fake.ids
	var items []map[string]any
	if rp.reasoningTokens > 0 {
		items = append(items, map[string]any{"type": "reasoning", "id": ids.next("rs_"), "summary": []any{map[string]any{"type": "summary_text", "text": "Thinking."}}})
	}
	items = append(items, builtinCalls(ids, rp.webSearches, ctl)...)
	if rp.tool != nil {
		items = append(items, map[string]any{"type": "function_call", "id": ids.next("fc_"), "call_id": ids.next("call_"),
			"name": rp.tool.name, "arguments": string(rp.tool.arguments), "status": "completed"})
	} else {
		items = append(items, map[string]any{"type": "message", "id": ids.next("msg_"), "status": "completed", "role": "assistant",
			"content": []any{map[string]any{"type": "output_text", "text": rp.text(), "annotations": []any{}}}})
	}
	status := "completed"
	var incomplete, failure any
	usage := rp.responseUsage()
	switch {
	case ctl.FailResponse:
		status = "failed"
		failure = map[string]any{"code": "server_error", "message": "The fake vendor failed this response."}
		usage["output_tokens"], usage["total_tokens"] = 0, usage["input_tokens"]
		usage["output_tokens_details"] = map[string]any{"reasoning_tokens": 0}
		items = nil
	case rp.truncated:
		status = "incomplete"
		incomplete = map[string]any{"reason": "max_output_tokens"}
	}
	output := make([]any, len(items))
	for i, it := range items {
		output[i] = it
	}
	var maxOut any
	if req.MaxOutputTokens > 0 {
		maxOut = req.MaxOutputTokens
	}
	var prev any
	if req.PreviousResponseID != "" {
		prev = req.PreviousResponseID
	}
	final := map[string]any{
		"id": id, "object": "response", "created_at": time.Now().Unix(), "status": status,
		"background": req.Background, "error": failure, "incomplete_details": incomplete,
		"instructions": req.Instructions, "max_output_tokens": maxOut, "model": req.Model,
		"output": output, "parallel_tool_calls": true, "previous_response_id": prev,
		"reasoning": map[string]any{"effort": nil, "summary": nil}, "service_tier": cmp.Or(rp.serviceTier, "default"),
		"store": store, "temperature": 1.0, "text": map[string]any{"format": map[string]any{"type": "text"}},
		"tool_choice": "auto", "tools": []any{}, "top_p": 1.0, "truncation": "disabled", "usage": usage,
		"metadata": map[string]any{},
	}

	// The events of a stream, numbered as the vendor numbers them.
	var events [][]byte
	seq := 0
	emit := func(typ string, fields map[string]any) {
		fields["type"], fields["sequence_number"] = typ, seq
		seq++
		data, _ := json.Marshal(fields)
		events = append(events, data)
	}
	emit("response.created", map[string]any{"response": snapshot(final, "in_progress")})
	emit("response.in_progress", map[string]any{"response": snapshot(final, "in_progress")})
	for i, it := range items {
		emit("response.output_item.added", map[string]any{"output_index": i, "item": started(it)})
		switch it["type"] {
		case "reasoning":
			emit("response.reasoning_summary_text.delta", map[string]any{"item_id": it["id"], "output_index": i, "summary_index": 0, "delta": "Thinking."})
		case "function_call":
			for _, f := range rp.tool.fragments {
				emit("response.function_call_arguments.delta", map[string]any{"item_id": it["id"], "output_index": i, "delta": string(f)})
			}
			emit("response.function_call_arguments.done", map[string]any{"item_id": it["id"], "output_index": i, "arguments": it["arguments"]})
		case "message":
			part := map[string]any{"type": "output_text", "text": "", "annotations": []any{}}
			emit("response.content_part.added", map[string]any{"item_id": it["id"], "output_index": i, "content_index": 0, "part": part})
			for j, word := range rp.words {
				d := word
				if j > 0 {
					d = " " + word
				}
				emit("response.output_text.delta", map[string]any{"item_id": it["id"], "output_index": i, "content_index": 0, "delta": d, "logprobs": []any{}})
			}
			emit("response.output_text.done", map[string]any{"item_id": it["id"], "output_index": i, "content_index": 0, "text": rp.text(), "logprobs": []any{}})
			emit("response.content_part.done", map[string]any{"item_id": it["id"], "output_index": i, "content_index": 0,
				"part": map[string]any{"type": "output_text", "text": rp.text(), "annotations": []any{}}})
		}
		emit("response.output_item.done", map[string]any{"output_index": i, "item": it})
	}
	emit("response."+map[string]string{"completed": "completed", "incomplete": "incomplete", "failed": "failed"}[status], map[string]any{"response": final})
	return final, events
}

// builtinCalls are the output items of the built-in tools: the reply's
// web searches, then the file searches, code interpreter calls spread over
// their containers and image generations the controls ask for.
func builtinCalls(ids *idSource, webSearches int, ctl *Controls) []map[string]any {
	var items []map[string]any
	for range webSearches {
		items = append(items, map[string]any{"type": "web_search_call", "id": ids.next("ws_"), "status": "completed",
			"action": map[string]any{"type": "search", "query": "fake search"}})
	}
	for range ctl.FileSearchCalls {
		items = append(items, map[string]any{"type": "file_search_call", "id": ids.next("fs_"), "status": "completed",
			"queries": []any{"fake query"}, "results": nil})
	}
	containers := max(ctl.CodeInterpreterContainers, 1)
	for i := range ctl.CodeInterpreterCalls {
		items = append(items, map[string]any{"type": "code_interpreter_call", "id": ids.next("ci_"), "status": "completed",
			"code": "print(1)", "container_id": "cntr_fake_" + strconv.Itoa(i%containers), "outputs": nil})
	}
	for range ctl.ImageGenerationCalls {
		items = append(items, map[string]any{"type": "image_generation_call", "id": ids.next("ig_"), "status": "completed",
			"result": "ZmFrZSBpbWFnZQ=="})
	}
	return items
}

// started is an output item as output_item.added shows it: in progress,
// without its content.
func started(it map[string]any) map[string]any {
	s := make(map[string]any, len(it))
	for k, v := range it {
		s[k] = v
	}
	switch it["type"] {
	case "message":
		s["content"], s["status"] = []any{}, "in_progress"
	case "function_call":
		s["arguments"], s["status"] = "", "in_progress"
	case "web_search_call", "file_search_call", "code_interpreter_call", "image_generation_call":
		s["status"] = "in_progress"
	case "reasoning":
		s["summary"] = []any{}
	}
	return s
}

// storedPath splits /v1/responses/{id}[/action].
func storedPath(p string) (id, action string) {
	rest := strings.TrimPrefix(p, "/v1/responses/")
	id, action, _ = strings.Cut(rest, "/")
	return id, action
}

// stored serves GET, DELETE /v1/responses/{id}, POST …/{id}/cancel and
// GET …/{id}/input_items.
func (b *chatAPI) storedResponse(w http.ResponseWriter, r *http.Request, body []byte, ctl *Controls) {
	id, action := storedPath(r.URL.Path)
	sr, ok := b.stored.get(id)
	if !ok || !sr.readBy(requestKey(r)) {
		b.writeError(w, r, http.StatusNotFound, "Response with id '"+id+"' not found.")
		return
	}
	switch {
	case r.Method == http.MethodDelete && action == "":
		b.stored.remove(id)
		writeJSON(w, http.StatusOK, map[string]any{"id": id, "object": "response", "deleted": true})
	case r.Method == http.MethodPost && action == "cancel":
		if !sr.background {
			b.writeError(w, r, http.StatusBadRequest, "Only background responses can be cancelled.")
			return
		}
		b.stored.mu.Lock()
		if sr.pending > 0 {
			// Cancelled before it ended: its input is billed, no output.
			ended := sr.response()
			c := snapshot(ended, "cancelled")
			u := ended["usage"].(map[string]any)
			u["output_tokens"], u["total_tokens"] = 0, u["input_tokens"]
			u["output_tokens_details"] = map[string]any{"reasoning_tokens": 0}
			c["usage"] = u
			sr.final, sr.pending = appendJSON(nil, c), 0
		}
		final := sr.final
		b.stored.mu.Unlock()
		writeJSON(w, http.StatusOK, json.RawMessage(final))
	case r.Method == http.MethodGet && action == "input_items":
		data := sr.input
		if data == nil {
			data = []any{}
		}
		writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": data, "has_more": false, "first_id": nil, "last_id": nil})
	case r.Method == http.MethodGet && action == "":
		b.stored.mu.Lock()
		var obj any = json.RawMessage(sr.final)
		if sr.pending > 0 {
			sr.pending--
			obj = snapshot(sr.response(), "in_progress")
		}
		b.stored.mu.Unlock()
		if r.URL.Query().Get("stream") != "true" {
			writeJSON(w, http.StatusOK, obj)
			return
		}
		after := -1
		if v := r.URL.Query().Get("starting_after"); v != "" {
			after, _ = strconv.Atoi(v)
		}
		s := startSSE(w, r, ctl)
		defer s.release()
		for i := max(after+1, 0); i < len(sr.ends); i++ {
			ev := sr.event(i)
			s.event(eventType(ev), ev)
		}
	default:
		b.writeError(w, r, http.StatusNotFound, "")
	}
}

// inputTokensCount serves POST /v1/responses/input_tokens.
func (b *chatAPI) inputTokensCount(w http.ResponseWriter, r *http.Request, body []byte, ctl *Controls) {
	writeJSON(w, http.StatusOK, map[string]any{"object": "response.input_tokens", "input_tokens": inputTokens(body)})
}

// compact serves POST /v1/responses/compact: one compaction item, its
// input the request's, 5 output tokens.
func (b *chatAPI) compact(w http.ResponseWriter, r *http.Request, body []byte, ctl *Controls) {
	id := b.fake.ids.next("cmp_")
	in := inputTokens(body)
	writeJSON(w, http.StatusOK, map[string]any{
		"id": id, "object": "response.compaction", "created_at": time.Now().Unix(),
		"output": []any{map[string]any{"type": "compaction", "id": id, "encrypted_content": "ZmFrZQ=="}},
		"usage": map[string]any{"input_tokens": in, "input_tokens_details": map[string]any{"cached_tokens": 0},
			"output_tokens": 5, "output_tokens_details": map[string]any{"reasoning_tokens": 0}, "total_tokens": in + 5},
	})
}

// embeddingSize is the length of the fake's embedding vectors.
const embeddingSize = 8

// embeddings serves POST /v1/embeddings: one vector per input (a string or
// an array of them), as floats or, with "encoding_format":"base64", as
// little-endian float32 bytes; usage.prompt_tokens is ceil(len(body)/8).
func (b *chatAPI) embeddings(w http.ResponseWriter, r *http.Request, body []byte, ctl *Controls) {
	var req struct {
		Model          string          `json:"model"`
		Input          json.RawMessage `json:"input"`
		EncodingFormat string          `json:"encoding_format"`
	}
	if err := json.Unmarshal(body, &req); err != nil || req.Model == "" || len(req.Input) == 0 {
		b.writeError(w, r, http.StatusBadRequest, "'model' and 'input' are required.")
		return
	}
	n := 1
	var list []json.RawMessage
	if json.Unmarshal(req.Input, &list) == nil && len(list) > 0 && strings.HasPrefix(strings.TrimSpace(string(list[0])), `"`) {
		n = len(list)
	}
	data := make([]any, n)
	for i := range n {
		vec := make([]float32, embeddingSize)
		for j := range vec {
			vec[j] = float32(i+1) / float32(j+2)
		}
		var emb any = vec
		if req.EncodingFormat == "base64" {
			raw := make([]byte, 4*len(vec))
			for j, v := range vec {
				binary.LittleEndian.PutUint32(raw[4*j:], math.Float32bits(v))
			}
			emb = base64.StdEncoding.EncodeToString(raw)
		}
		data[i] = map[string]any{"object": "embedding", "index": i, "embedding": emb}
	}
	in := inputTokens(body)
	b.fake.embeddingsUsage.bill(r, req.Model, billed{Input: int64(in)})
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": data, "model": req.Model,
		"usage": map[string]any{"prompt_tokens": in, "total_tokens": in}})
}
