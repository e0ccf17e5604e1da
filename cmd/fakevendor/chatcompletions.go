package main

import (
	"cmp"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// systemFingerprint is sent in every completion, as the vendor does.
const systemFingerprint = "fp_fakevendor"

// chatAPI is the chat completions format: the OpenAI API, chat completions
// and the operations the vendor serves beside them (responses.go).
type chatAPI struct {
	fake   *fake
	stored responseStore // stored responses (responses.go)
}

func (b *chatAPI) requestIDHeader() string { return "X-Request-Id" }

func (b *chatAPI) authorized(r *http.Request) bool {
	// A comma-separated list: a pool of keys, each valid.
	a := r.Header.Get("Authorization")
	return b.fake.cfg.chatCompletionsKey == "" || strings.HasPrefix(a, "Bearer ") && validKey(b.fake.cfg.chatCompletionsKey, a[len("Bearer "):])
}

func (b *chatAPI) route(r *http.Request) (endpoint, bool) {
	p := r.URL.Path
	switch {
	case p == "/v1/chat/completions" && r.Method == http.MethodPost:
		return b.chatCompletions, false
	case p == "/v1/responses" && socketUpgrade(r):
		if b.fake.chatCompletionsCtl.get().NoWebSocket {
			return nil, false
		}
		return b.responsesSocket, false
	case p == "/v1/responses" && r.Method == http.MethodPost:
		return b.responses, false
	case p == "/v1/responses/input_tokens" && r.Method == http.MethodPost:
		return b.inputTokensCount, false
	case p == "/v1/responses/compact" && r.Method == http.MethodPost:
		return b.compact, false
	case strings.HasPrefix(p, "/v1/responses/"):
		return b.storedResponse, false
	case p == "/v1/embeddings" && r.Method == http.MethodPost:
		return b.embeddings, false
	case p == "/v1/audio/transcriptions" && r.Method == http.MethodPost:
		return b.transcriptions, false
	case p == "/v1/images/generations" && r.Method == http.MethodPost:
		return b.images, false
	case p == "/v1/models" && r.Method == http.MethodGet:
		return b.models, true
	case strings.HasPrefix(p, "/v1/models/") && r.Method == http.MethodGet:
		return b.model, true
	}
	return nil, false
}

// chatError is the vendor's error body.
type chatError struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    string  `json:"code"`
	} `json:"error"`
}

// chatErrorKind maps a status to an error type and code like the vendor's.
func chatErrorKind(status int) (typ, code string) {
	switch status {
	case 400:
		return "invalid_request_error", "invalid_request"
	case 401:
		return "invalid_request_error", "invalid_api_key"
	case 403:
		return "invalid_request_error", "forbidden"
	case 404:
		return "invalid_request_error", "not_found"
	case 408:
		return "invalid_request_error", "timeout"
	case 409:
		return "invalid_request_error", "conflict"
	case 413:
		return "invalid_request_error", "request_too_large"
	case 429:
		return "requests", "rate_limit_exceeded"
	case 503:
		return "server_error", "service_unavailable"
	}
	if status >= 500 {
		return "server_error", "server_error"
	}
	return "invalid_request_error", "invalid_request"
}

func (b *chatAPI) writeError(w http.ResponseWriter, r *http.Request, status int, msg string) {
	if msg == "" {
		switch status {
		case 401:
			msg = "Incorrect API key provided."
		case 404:
			msg = "Invalid URL (" + r.Method + " " + r.URL.Path + ")"
		default:
			msg = http.StatusText(status)
		}
	}
	var e chatError
	e.Error.Type, e.Error.Code = chatErrorKind(status)
	e.Error.Message = msg
	writeJSON(w, status, &e)
}

// chatRequest is the part of a chat completions request the fake looks at.
type chatRequest struct {
	Model         string    `json:"model"`
	Messages      []message `json:"messages"`
	Stream        bool      `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	MaxTokens           int `json:"max_tokens"`
	MaxCompletionTokens int `json:"max_completion_tokens"`
	// N is the number of choices; each is billed as output.
	N     int `json:"n"`
	Tools []struct {
		Type     string `json:"type"`
		Function struct {
			Name       string          `json:"name"`
			Parameters json.RawMessage `json:"parameters"`
		} `json:"function"`
	} `json:"tools"`
}

// limit is the output token limit: max_completion_tokens, or the older
// max_tokens, or 0 for none.
func (req *chatRequest) limit() int {
	if req.MaxCompletionTokens > 0 {
		return req.MaxCompletionTokens
	}
	return req.MaxTokens
}

type chatUsage struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	TotalTokens         int `json:"total_tokens"`
	PromptTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
		AudioTokens  int `json:"audio_tokens"`
	} `json:"prompt_tokens_details"`
	CompletionTokensDetails struct {
		ReasoningTokens          int `json:"reasoning_tokens"`
		AudioTokens              int `json:"audio_tokens"`
		AcceptedPredictionTokens int `json:"accepted_prediction_tokens"`
		RejectedPredictionTokens int `json:"rejected_prediction_tokens"`
	} `json:"completion_tokens_details"`
}

// usage reports prompt_tokens including the cached tokens, as the vendor
// does: uncached input is inputTokens, the same as messages' input_tokens.
// completion_tokens includes the reasoning tokens.
func (rp *reply) chatUsage() chatUsage {
	var u chatUsage
	u.PromptTokens = rp.inputTokens + rp.cacheRead + rp.audioIn
	u.CompletionTokens = rp.outputTokens + rp.reasoningTokens + rp.audioOut
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	u.PromptTokensDetails.CachedTokens = rp.cacheRead
	u.PromptTokensDetails.AudioTokens = rp.audioIn
	u.CompletionTokensDetails.ReasoningTokens = rp.reasoningTokens
	u.CompletionTokensDetails.AudioTokens = rp.audioOut
	return u
}

// chatFinishReason is "tool_calls" for a tool call, "length" when the token
// limit cut the text short, and "stop" otherwise.
func (rp *reply) chatFinishReason() string {
	switch {
	case rp.tool != nil:
		return "tool_calls"
	case rp.truncated:
		return "length"
	}
	return "stop"
}

type chatToolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

type chatMessage struct {
	Role        string         `json:"role"`
	Content     *string        `json:"content"`
	ToolCalls   []chatToolCall `json:"tool_calls,omitempty"`
	Refusal     *string        `json:"refusal"`
	Annotations []any          `json:"annotations"`
}

type chatChoice struct {
	Index        int         `json:"index"`
	Message      chatMessage `json:"message"`
	Logprobs     *struct{}   `json:"logprobs"`
	FinishReason string      `json:"finish_reason"`
}

type chatCompletion struct {
	ID                string       `json:"id"`
	Object            string       `json:"object"`
	Created           int64        `json:"created"`
	Model             string       `json:"model"`
	Choices           []chatChoice `json:"choices"`
	Usage             chatUsage    `json:"usage"`
	ServiceTier       string       `json:"service_tier"`
	SystemFingerprint string       `json:"system_fingerprint"`
}

// chatCompletions serves POST /v1/chat/completions.
func (b *chatAPI) chatCompletions(w http.ResponseWriter, r *http.Request, body []byte, ctl *Controls) {
	var req chatRequest
	if err := json.Unmarshal(body, &req); err != nil {
		b.writeError(w, r, http.StatusBadRequest, "We could not parse the JSON body of your request: "+err.Error())
		return
	}
	var tool *toolCall
	for _, t := range req.Tools {
		if t.Function.Name != "" {
			tool = &toolCall{name: t.Function.Name, arguments: toolArguments(t.Function.Parameters)}
			break
		}
	}
	rp := planReply(body, req.Messages, req.limit(), tool, ctl)
	if req.N > 1 && rp.tool == nil {
		// n text choices, the same text each: billed n times.
		rp.choices = req.N
		rp.outputTokens *= req.N
	}
	b.fake.chatCompletionsUsage.bill(r, req.Model, rp.billed())
	id := b.fake.ids.next("chatcmpl-")
	if req.Stream {
		b.stream(w, r, &req, rp, id, ctl)
		return
	}

	c := chatCompletion{
		ID:                id,
		Object:            "chat.completion",
		Created:           time.Now().Unix(),
		Model:             req.Model,
		Usage:             rp.chatUsage(),
		ServiceTier:       cmp.Or(rp.serviceTier, "default"),
		SystemFingerprint: systemFingerprint,
	}
	c.Choices = make([]chatChoice, 1, max(rp.choices, 1))
	ch := &c.Choices[0]
	ch.FinishReason = rp.chatFinishReason()
	ch.Message = chatMessage{Role: "assistant", Annotations: []any{}}
	if rp.tool != nil {
		var tc chatToolCall
		tc.ID = b.fake.ids.next("call_")
		tc.Type = "function"
		tc.Function.Name = rp.tool.name
		tc.Function.Arguments = string(rp.tool.arguments)
		ch.Message.ToolCalls = []chatToolCall{tc}
	} else {
		text := rp.text()
		ch.Message.Content = &text
	}
	for i := 1; i < rp.choices; i++ {
		more := *ch
		more.Index = i
		c.Choices = append(c.Choices, more)
	}
	writeJSON(w, http.StatusOK, &c)
}

// stream sends the reply as chat.completion.chunk events: a first chunk with
// the role, one chunk per word (or argument fragment), a chunk with the
// finish reason, and "data: [DONE]". As the vendor does, only with
// stream_options.include_usage true does every chunk carry "usage":null and
// a last chunk with no choices carry the usage; otherwise no chunk has a
// usage field.
func (b *chatAPI) stream(w http.ResponseWriter, r *http.Request, req *chatRequest, rp *reply, id string, ctl *Controls) {
	includeUsage := req.StreamOptions != nil && req.StreamOptions.IncludeUsage

	// Every chunk starts alike; build that once.
	var prefix []byte
	prefix = append(prefix, `{"id":`...)
	prefix = appendJSONString(prefix, id)
	prefix = append(prefix, `,"object":"chat.completion.chunk","created":`...)
	prefix = strconv.AppendInt(prefix, time.Now().Unix(), 10)
	prefix = append(prefix, `,"model":`...)
	prefix = appendJSONString(prefix, req.Model)
	prefix = append(prefix, `,"service_tier":`...)
	prefix = appendJSONString(prefix, cmp.Or(rp.serviceTier, "default"))
	prefix = append(prefix, `,"system_fingerprint":"`+systemFingerprint+`","choices":[`...)
	suffix := "]}"
	if includeUsage {
		suffix = `],"usage":null}`
	}
	const choiceEnd = `,"logprobs":null,"finish_reason":null}`

	s := startSSE(w, r, ctl)
	defer s.release()

	s.begin("")
	s.buf = append(s.buf, prefix...)
	if rp.tool != nil {
		s.buf = append(s.buf, `{"index":0,"delta":{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":`...)
		s.buf = appendJSONString(s.buf, b.fake.ids.next("call_"))
		s.buf = append(s.buf, `,"type":"function","function":{"name":`...)
		s.buf = appendJSONString(s.buf, rp.tool.name)
		s.buf = append(s.buf, `,"arguments":""}}],"refusal":null}`...)
	} else {
		s.buf = append(s.buf, `{"index":0,"delta":{"role":"assistant","content":"","refusal":null}`...)
	}
	s.buf = append(s.buf, choiceEnd...)
	s.buf = append(s.buf, suffix...)
	s.end()

	if rp.tool != nil {
		for _, frag := range rp.tool.fragments {
			s.begin("")
			s.buf = append(s.buf, prefix...)
			s.buf = append(s.buf, `{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":`...)
			s.buf = appendJSONString(s.buf, string(frag))
			s.buf = append(s.buf, `}}]}`...)
			s.buf = append(s.buf, choiceEnd...)
			s.buf = append(s.buf, suffix...)
			s.end()
		}
	} else {
		for i, word := range rp.words {
			for c := range max(rp.choices, 1) {
				s.begin("")
				s.buf = append(s.buf, prefix...)
				s.buf = append(s.buf, `{"index":`...)
				s.buf = strconv.AppendInt(s.buf, int64(c), 10)
				s.buf = append(s.buf, `,"delta":{"content":"`...)
				if i > 0 {
					s.buf = append(s.buf, ' ')
				}
				s.buf = appendEscaped(s.buf, word)
				s.buf = append(s.buf, `"}`...)
				s.buf = append(s.buf, choiceEnd...)
				s.buf = append(s.buf, suffix...)
				s.end()
			}
		}
	}

	s.begin("")
	s.buf = append(s.buf, prefix...)
	s.buf = append(s.buf, `{"index":0,"delta":{},"logprobs":null,"finish_reason":"`...)
	s.buf = append(s.buf, rp.chatFinishReason()...)
	s.buf = append(s.buf, `"}`...)
	s.buf = append(s.buf, suffix...)
	s.end()

	if includeUsage {
		s.begin("")
		s.buf = append(s.buf, prefix...)
		s.buf = append(s.buf, `],"usage":`...)
		s.buf = appendJSON(s.buf, rp.chatUsage())
		s.buf = append(s.buf, '}')
		s.end()
	}

	s.event("", []byte("[DONE]"))
}

// chatModel is one entry of the vendor's model list.
type chatModel struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}

func newChatModel(id string) chatModel {
	return chatModel{ID: id, Object: "model", Created: 1735689600, OwnedBy: "system"}
}

// models serves GET /v1/models.
func (b *chatAPI) models(w http.ResponseWriter, r *http.Request, body []byte, ctl *Controls) {
	ids := b.fake.cfg.chatCompletionsModels
	list := struct {
		Object string      `json:"object"`
		Data   []chatModel `json:"data"`
	}{Object: "list", Data: make([]chatModel, 0, len(ids))}
	for _, id := range ids {
		list.Data = append(list.Data, newChatModel(id))
	}
	writeJSON(w, http.StatusOK, &list)
}

// model serves GET /v1/models/{id}.
func (b *chatAPI) model(w http.ResponseWriter, r *http.Request, body []byte, ctl *Controls) {
	id := strings.TrimPrefix(r.URL.Path, "/v1/models/")
	for _, m := range b.fake.cfg.chatCompletionsModels {
		if m == id {
			writeJSON(w, http.StatusOK, newChatModel(id))
			return
		}
	}
	b.writeError(w, r, http.StatusNotFound, "The model '"+id+"' does not exist")
}

// socketUpgrade reports whether r opens a WebSocket.
func socketUpgrade(r *http.Request) bool {
	return r.Method == http.MethodGet && strings.EqualFold(r.Header.Get("Upgrade"), "websocket")
}
