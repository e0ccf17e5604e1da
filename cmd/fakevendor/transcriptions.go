package main

import (
	"bytes"
	"cmp"
	"fmt"
	"io"
	"math"
	"mime"
	"mime/multipart"
	"net/http"
	"strings"
)

// transcriptions serves POST /v1/audio/transcriptions, a multipart form
// (file, model, stream, response_format, prompt), as the vendor does:
//
//   - whisper-* models report a duration, usage {"type":"duration",
//     "seconds":S}, S the file's size at 16 kB a second (128 kbit/s) to a
//     hundredth; verbose_json also carries "duration"; they never stream.
//   - other models report tokens: audio tokens one per 1,600 bytes of file
//     (audio_input_tokens overrides), text tokens the prompt's at 8 bytes a
//     token (input_tokens, when set, is the whole input), output the
//     transcript's words (output_tokens overrides); with stream=true a
//     transcript.text.delta event per word, then transcript.text.done with
//     the usage. Their tokens are billed in the completions usage report.
//   - response_format text, srt and vtt are the bare transcript, no usage.
func (b *chatAPI) transcriptions(w http.ResponseWriter, r *http.Request, body []byte, ctl *Controls) {
	f, refusal := readTranscriptionForm(r.Header.Get("Content-Type"), body)
	if refusal != "" {
		b.writeError(w, r, http.StatusBadRequest, refusal)
		return
	}
	words := replyWords("", ctl.replyWords())
	text := strings.Join(words, " ")
	if rf := f.responseFormat; rf == "text" || rf == "srt" || rf == "vtt" {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusOK)
		io.WriteString(w, text+"\n")
		return
	}
	if strings.HasPrefix(f.model, "whisper") {
		secs := float64(f.fileBytes*100/16000) / 100
		b.fake.transcriptionsUsage.bill(r, f.model, billed{AudioSeconds: int64(math.Ceil(secs))})
		reply := map[string]any{"text": text, "usage": map[string]any{"type": "duration", "seconds": secs}}
		if f.responseFormat == "verbose_json" {
			reply["task"], reply["language"], reply["duration"], reply["segments"] = "transcribe", "english", secs, []any{}
		}
		writeJSON(w, http.StatusOK, reply)
		return
	}
	audio := cmp.Or(ctl.AudioInputTokens, max(1, f.fileBytes/1600))
	input := audio + (f.promptBytes+7)/8
	if ctl.InputTokens != 0 {
		input = ctl.InputTokens
	}
	output := cmp.Or(ctl.OutputTokens, len(words))
	// Billed in the completions usage report, audio apart from text.
	b.fake.chatCompletionsUsage.bill(r, f.model, billed{Input: int64(input - min(audio, input)), AudioInput: int64(min(audio, input)), Output: int64(output)})
	usage := map[string]any{
		"type": "tokens", "input_tokens": input,
		"input_token_details": map[string]any{"text_tokens": input - audio, "audio_tokens": audio},
		"output_tokens":       output, "total_tokens": input + output,
	}
	if !f.stream {
		writeJSON(w, http.StatusOK, map[string]any{"text": text, "usage": usage})
		return
	}
	s := startSSE(w, r, ctl)
	defer s.release()
	for i, word := range words {
		if i > 0 {
			word = " " + word
		}
		s.event("", appendJSON(nil, map[string]any{"type": "transcript.text.delta", "delta": word}))
	}
	s.event("", appendJSON(nil, map[string]any{"type": "transcript.text.done", "text": text, "usage": usage}))
}

// transcriptionForm is what the fake reads of a transcription request.
type transcriptionForm struct {
	model, responseFormat  string
	stream                 bool
	fileBytes, promptBytes int
}

// readTranscriptionForm parses the multipart body; refusal, when not
// empty, is the vendor's 400 message, in its words.
func readTranscriptionForm(contentType string, body []byte) (f transcriptionForm, refusal string) {
	mt, params, err := mime.ParseMediaType(contentType)
	if err != nil || mt != "multipart/form-data" {
		return f, fmt.Sprintf("Invalid Content-Type header (%q), expected multipart/form-data.", contentType)
	}
	mr := multipart.NewReader(bytes.NewReader(body), params["boundary"])
	haveFile := false
	for {
		p, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			return f, "Could not parse multipart form."
		}
		v, err := io.ReadAll(p)
		if err != nil {
			return f, "Could not parse multipart form."
		}
		switch p.FormName() {
		case "file":
			f.fileBytes, haveFile = len(v), true
		case "model":
			f.model = string(v)
		case "stream":
			f.stream = string(v) == "true"
		case "response_format":
			f.responseFormat = string(v)
		case "prompt":
			f.promptBytes = len(v)
		}
	}
	if f.model == "" || !haveFile {
		return f, "'file' and 'model' are required."
	}
	if strings.HasPrefix(f.model, "whisper") {
		f.stream = false // the vendor ignores stream for whisper-1
	}
	return f, ""
}
