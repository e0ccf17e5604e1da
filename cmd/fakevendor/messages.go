package main

import (
	"cmp"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
)

// messagesAPI is the messages format: the Anthropic Messages API.
type messagesAPI struct {
	fake *fake
}

func (a *messagesAPI) requestIDHeader() string { return "Request-Id" }

// authorized accepts the key in x-api-key, the vendor's documented header,
// or as a bearer token, which is what recent official SDKs (anthropic 2.x
// for Python) send for api_key.
func (a *messagesAPI) authorized(r *http.Request) bool {
	// A comma-separated list: a pool of keys, each valid.
	return a.fake.cfg.messagesKey == "" || validKey(a.fake.cfg.messagesKey, requestKey(r))
}

func (a *messagesAPI) route(r *http.Request) (endpoint, bool) {
	p := r.URL.Path
	switch {
	case p == "/v1/messages" && r.Method == http.MethodPost:
		return a.messages, false
	case p == "/v1/messages/count_tokens" && r.Method == http.MethodPost:
		return a.countTokens, false
	case p == "/v1/models" && r.Method == http.MethodGet:
		return a.models, true
	case strings.HasPrefix(p, "/v1/models/") && r.Method == http.MethodGet:
		return a.model, true
	}
	return nil, false
}

// messagesError is the vendor's error body.
type messagesError struct {
	Type  string `json:"type"`
	Error struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	} `json:"error"`
}

// messagesErrorType maps a status to the error type the vendor documents for
// it.
func messagesErrorType(status int) string {
	switch status {
	case 400:
		return "invalid_request_error"
	case 401:
		return "authentication_error"
	case 402:
		return "billing_error"
	case 403:
		return "permission_error"
	case 404:
		return "not_found_error"
	case 408, 504:
		return "timeout_error"
	case 413:
		return "request_too_large"
	case 429:
		return "rate_limit_error"
	case 529:
		return "overloaded_error"
	}
	if status >= 500 {
		return "api_error"
	}
	return "invalid_request_error"
}

func (a *messagesAPI) writeError(w http.ResponseWriter, r *http.Request, status int, msg string) {
	if msg == "" {
		switch status {
		case 401:
			msg = "invalid x-api-key"
		case 404:
			msg = "Not found"
		default:
			msg = http.StatusText(status)
		}
	}
	var e messagesError
	e.Type = "error"
	e.Error.Type = messagesErrorType(status)
	e.Error.Message = msg
	writeJSON(w, status, &e)
}

// messagesRequest is the part of a messages request the fake looks at.
type messagesRequest struct {
	Model     string    `json:"model"`
	MaxTokens int       `json:"max_tokens"`
	Stream    bool      `json:"stream"`
	Messages  []message `json:"messages"`
	Tools     []struct {
		Name        string          `json:"name"`
		InputSchema json.RawMessage `json:"input_schema"`
	} `json:"tools"`
}

type messagesUsage struct {
	InputTokens              int `json:"input_tokens"`
	CacheCreationInputTokens int `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int `json:"cache_read_input_tokens"`
	CacheCreation            struct {
		Ephemeral5mInputTokens int `json:"ephemeral_5m_input_tokens"`
		Ephemeral1hInputTokens int `json:"ephemeral_1h_input_tokens"`
	} `json:"cache_creation"`
	OutputTokens  int              `json:"output_tokens"`
	ServerToolUse *messagesToolUse `json:"server_tool_use,omitempty"`
	ServiceTier   string           `json:"service_tier"`
}

type messagesToolUse struct {
	WebSearchRequests int `json:"web_search_requests"`
}

type messagesObject struct {
	ID           string        `json:"id"`
	Type         string        `json:"type"`
	Role         string        `json:"role"`
	Model        string        `json:"model"`
	Content      []any         `json:"content"`
	StopReason   *string       `json:"stop_reason"`
	StopSequence *string       `json:"stop_sequence"`
	Usage        messagesUsage `json:"usage"`
}

type messagesTextBlock struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

type messagesToolUseBlock struct {
	Type  string          `json:"type"`
	ID    string          `json:"id"`
	Name  string          `json:"name"`
	Input json.RawMessage `json:"input"`
}

func (a *messagesAPI) usage(rp *reply, outputTokens int) messagesUsage {
	u := messagesUsage{
		InputTokens:              rp.inputTokens,
		CacheCreationInputTokens: rp.cacheWrite + rp.cacheWrite1h,
		CacheReadInputTokens:     rp.cacheRead,
		OutputTokens:             outputTokens,
		ServiceTier:              cmp.Or(rp.serviceTier, "standard"),
	}
	u.CacheCreation.Ephemeral5mInputTokens = rp.cacheWrite
	u.CacheCreation.Ephemeral1hInputTokens = rp.cacheWrite1h
	if rp.webSearches > 0 {
		u.ServerToolUse = &messagesToolUse{WebSearchRequests: rp.webSearches}
	}
	return u
}

// stopReason is "tool_use" for a tool call, "max_tokens" when max_tokens
// cut the text short, and "end_turn" otherwise.
func (rp *reply) messagesStopReason() string {
	switch {
	case rp.tool != nil:
		return "tool_use"
	case rp.truncated:
		return "max_tokens"
	}
	return "end_turn"
}

// messages serves POST /v1/messages.
func (a *messagesAPI) messages(w http.ResponseWriter, r *http.Request, body []byte, ctl *Controls) {
	var req messagesRequest
	if err := json.Unmarshal(body, &req); err != nil {
		a.writeError(w, r, http.StatusBadRequest, "There was an issue with the request body: "+err.Error())
		return
	}
	var tool *toolCall
	for _, t := range req.Tools {
		if t.Name != "" {
			tool = &toolCall{name: t.Name, arguments: toolArguments(t.InputSchema)}
			break
		}
	}
	rp := planReply(body, req.Messages, req.MaxTokens, tool, ctl)
	a.fake.messagesUsage.bill(r, req.Model, rp.billed())
	id := a.fake.ids.next("msg_")
	if req.Stream {
		a.stream(w, r, &req, rp, id, ctl)
		return
	}

	stop := rp.messagesStopReason()
	msg := messagesObject{
		ID:         id,
		Type:       "message",
		Role:       "assistant",
		Model:      req.Model,
		StopReason: &stop,
		Usage:      a.usage(rp, rp.outputTokens),
	}
	if rp.tool != nil {
		msg.Content = []any{messagesToolUseBlock{
			Type:  "tool_use",
			ID:    a.fake.ids.next("toolu_"),
			Name:  rp.tool.name,
			Input: rp.tool.arguments,
		}}
	} else {
		msg.Content = []any{messagesTextBlock{Type: "text", Text: rp.text()}}
	}
	writeJSON(w, http.StatusOK, &msg)
}

// stream sends the reply as the vendor's event sequence: message_start,
// content_block_start, ping, one content_block_delta per word (or argument
// fragment), content_block_stop, message_delta, message_stop.
func (a *messagesAPI) stream(w http.ResponseWriter, r *http.Request, req *messagesRequest, rp *reply, id string, ctl *Controls) {
	s := startSSE(w, r, ctl)
	defer s.release()

	s.begin("message_start")
	s.buf = appendJSON(s.buf, struct {
		Type    string         `json:"type"`
		Message messagesObject `json:"message"`
	}{"message_start", messagesObject{
		ID:      id,
		Type:    "message",
		Role:    "assistant",
		Model:   req.Model,
		Content: []any{},
		Usage:   a.usage(rp, 1),
	}})
	s.end()

	s.begin("content_block_start")
	if rp.tool != nil {
		s.buf = append(s.buf, `{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":`...)
		s.buf = appendJSONString(s.buf, a.fake.ids.next("toolu_"))
		s.buf = append(s.buf, `,"name":`...)
		s.buf = appendJSONString(s.buf, rp.tool.name)
		s.buf = append(s.buf, `,"input":{}}}`...)
	} else {
		s.buf = append(s.buf, `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`...)
	}
	s.end()

	s.event("ping", []byte(`{"type":"ping"}`))

	if rp.tool != nil {
		for _, frag := range rp.tool.fragments {
			s.begin("content_block_delta")
			s.buf = append(s.buf, `{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":`...)
			s.buf = appendJSONString(s.buf, string(frag))
			s.buf = append(s.buf, "}}"...)
			s.end()
		}
	} else {
		for i, word := range rp.words {
			s.begin("content_block_delta")
			s.buf = append(s.buf, `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"`...)
			if i > 0 {
				s.buf = append(s.buf, ' ')
			}
			s.buf = appendEscaped(s.buf, word)
			s.buf = append(s.buf, `"}}`...)
			s.end()
		}
	}
	s.event("content_block_stop", []byte(`{"type":"content_block_stop","index":0}`))

	s.begin("message_delta")
	s.buf = append(s.buf, `{"type":"message_delta","delta":{"stop_reason":"`...)
	s.buf = append(s.buf, rp.messagesStopReason()...)
	s.buf = append(s.buf, `","stop_sequence":null},"usage":{"output_tokens":`...)
	s.buf = strconv.AppendInt(s.buf, int64(rp.outputTokens), 10)
	if rp.webSearches > 0 {
		// Server tools run during the reply: their count arrives with the
		// final usage.
		s.buf = append(s.buf, `,"server_tool_use":{"web_search_requests":`...)
		s.buf = strconv.AppendInt(s.buf, int64(rp.webSearches), 10)
		s.buf = append(s.buf, '}')
	}
	s.buf = append(s.buf, "}}"...)
	s.end()

	s.event("message_stop", []byte(`{"type":"message_stop"}`))
}

// countTokens serves POST /v1/messages/count_tokens.
func (a *messagesAPI) countTokens(w http.ResponseWriter, r *http.Request, body []byte, ctl *Controls) {
	var req messagesRequest
	if err := json.Unmarshal(body, &req); err != nil {
		a.writeError(w, r, http.StatusBadRequest, "There was an issue with the request body: "+err.Error())
		return
	}
	writeJSON(w, http.StatusOK, map[string]int{"input_tokens": inputTokens(body)})
}

// messagesModel is one entry of the vendor's model list.
type messagesModel struct {
	Type        string `json:"type"`
	ID          string `json:"id"`
	DisplayName string `json:"display_name"`
	CreatedAt   string `json:"created_at"`
	Lifecycle   string `json:"lifecycle"`
}

func newMessagesModel(id string) messagesModel {
	return messagesModel{Type: "model", ID: id, DisplayName: id, CreatedAt: "2025-01-01T00:00:00Z", Lifecycle: "active"}
}

// models serves GET /v1/models: one page holding every configured model.
func (a *messagesAPI) models(w http.ResponseWriter, r *http.Request, body []byte, ctl *Controls) {
	ids := a.fake.cfg.messagesModels
	page := struct {
		Data    []messagesModel `json:"data"`
		HasMore bool            `json:"has_more"`
		FirstID *string         `json:"first_id"`
		LastID  *string         `json:"last_id"`
	}{Data: make([]messagesModel, 0, len(ids))}
	for _, id := range ids {
		page.Data = append(page.Data, newMessagesModel(id))
	}
	if len(ids) > 0 {
		page.FirstID, page.LastID = &ids[0], &ids[len(ids)-1]
	}
	writeJSON(w, http.StatusOK, &page)
}

// model serves GET /v1/models/{id}.
func (a *messagesAPI) model(w http.ResponseWriter, r *http.Request, body []byte, ctl *Controls) {
	id := strings.TrimPrefix(r.URL.Path, "/v1/models/")
	for _, m := range a.fake.cfg.messagesModels {
		if m == id {
			writeJSON(w, http.StatusOK, newMessagesModel(id))
			return
		}
	}
	a.writeError(w, r, http.StatusNotFound, "model: "+id)
}
