package main

import (
	"encoding/json"
	"net/http"
)

// Abandoned attempts: a request the fake hangs on (the hang control) is,
// when told (POST /abandoned), billed in the usage reports as if generated
// in full when its client gives up, as a vendor bills a generation whose
// client left before the first byte. The usage is the reply the request
// would have got (planReply), under its key and model.

// abandonedControl is the body of POST /abandoned.
type abandonedControl struct {
	Format string `json:"format"` // "messages" or "chat_completions"
	Bill   bool   `json:"bill"`
}

func (h *controlHandler) postAbandoned(w http.ResponseWriter, r *http.Request) {
	var c abandonedControl
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16))
	dec.DisallowUnknownFields()
	err := dec.Decode(&c)
	s := h.fake.siteOf(c.Format)
	if err != nil || s == nil {
		writeControlJSON(w, http.StatusBadRequest, map[string]string{"error": `want {"format": "messages"|"chat_completions", "bill": BOOL}`})
		return
	}
	s.billAbandoned.Store(c.Bill)
	writeControlJSON(w, http.StatusOK, map[string]bool{"bill": c.Bill})
}

func (f *fake) siteOf(format string) *site {
	switch format {
	case "messages":
		return f.messages.(*site)
	case "chat_completions":
		return f.chatCompletions.(*site)
	}
	return nil
}

// billHung bills a hung request given up on, when the site is told to.
func (s *site) billHung(r *http.Request, body []byte) {
	if !s.billAbandoned.Load() {
		return
	}
	var req struct {
		Model               string    `json:"model"`
		Messages            []message `json:"messages"`
		MaxTokens           int       `json:"max_tokens"`
		MaxCompletionTokens int       `json:"max_completion_tokens"`
	}
	if json.Unmarshal(body, &req) != nil || req.Model == "" {
		return
	}
	ctl := s.ctl.get()
	rp := planReply(body, req.Messages, max(req.MaxTokens, req.MaxCompletionTokens), nil, &ctl)
	s.usage.bill(r, req.Model, rp.billed())
}
