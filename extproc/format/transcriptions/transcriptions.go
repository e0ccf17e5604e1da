// Package transcriptions implements the "transcriptions" wire format:
// OpenAI's audio transcriptions (POST /v1/audio/transcriptions), served on
// /beta/v1/audio/transcriptions. The request is a multipart form (the audio
// file, the model, options); the reply is JSON, or server-sent events with
// stream=true. Models billed per token report usage.type "tokens" (audio
// and text input, output); models billed by duration report usage.type
// "duration" (seconds of input audio).
package transcriptions

import (
	"bytes"
	"errors"
	"io"
	"mime"
	"mime/multipart"
	"slices"
	"strconv"
	"strings"

	"github.com/modelgateway/gateway/extproc/format"
	"github.com/modelgateway/gateway/extproc/format/chatcompletions"
)

// Format is the "transcriptions" format. The zero value is ready to use.
type Format struct{}

var _ format.Format = Format{}

// Name returns "transcriptions".
func (Format) Name() string { return "transcriptions" }

// ErrorBody renders an error as the vendor does on every path of its API.
func (Format) ErrorBody(e *format.Error) []byte { return chatcompletions.Format{}.ErrorBody(e) }

// Fields are the request's own fields, read by the hold rule (Bounds) and
// the meter. The file's content is never kept: only its size.
type Fields struct {
	// FileBytes is the size of the uploaded audio.
	FileBytes int64
	// PromptBytes is the size of the optional prompt, text input the
	// vendor bills as input tokens.
	PromptBytes int64
	// ResponseFormat is the reply's format as asked for ("json" when not).
	ResponseFormat string
	// ByDuration is set by the hold rule when the model is billed by the
	// duration of its input audio: a reply without usage is then estimated
	// in seconds, not tokens.
	ByDuration bool
}

// fieldLimit bounds the text fields read (model, stream, response_format):
// a longer one is not a value the vendor accepts.
const fieldLimit = 4 << 10

// billable are the response formats whose replies carry usage. text, srt
// and vtt replies are the bare transcript: nothing in them says what the
// vendor billed, so the gateway refuses them rather than guess.
var billable = []string{"json", "verbose_json", "diarized_json"}

// readField reads one of the form's text fields into req and own.
func readField(name, v string, req *format.Request, own *Fields) error {
	switch name {
	case "model":
		if v == "" {
			return format.Invalid("model", "model: must be a non-empty string")
		}
		req.Model = v
	case "stream":
		switch v {
		case "true":
			req.Stream = true
		case "false":
		default:
			return format.Invalid("stream", "stream: must be true or false")
		}
	case "response_format":
		own.ResponseFormat = v
	}
	return nil
}

// The kinds of form part the gateway reads.
const (
	partOther = iota // not read: passed on unread
	partFile
	partPrompt
	partField // a text field readField reads
)

// parts are the names of the form parts the gateway reads, by kind.
var parts = map[string]int{
	"file":            partFile,
	"prompt":          partPrompt,
	"model":           partField,
	"stream":          partField,
	"response_format": partField,
}

// partKind returns the kind of the part called name. A name that is not
// one the gateway reads but equals one under case folding is refused: form
// parsers that fold names (as encoding/json folds keys) would read that
// part as the field.
func partKind(name string) (int, error) {
	if kind, ok := parts[name]; ok {
		return kind, nil
	}
	for p := range parts {
		if strings.EqualFold(p, name) {
			return 0, format.FoldedKey(p, name)
		}
	}
	return partOther, nil
}

// ParseRequest reads the multipart form: model (required), file
// (required, one; only its size is read), stream, response_format and the
// size of prompt. A body that is not multipart/form-data with a boundary,
// or that does not parse as one, is refused as the vendor would refuse it.
func (Format) ParseRequest(body []byte, contentType string) (format.Request, error) {
	mt, params, err := mime.ParseMediaType(contentType)
	if err != nil || mt != "multipart/form-data" || params["boundary"] == "" {
		return format.Request{}, format.Invalid("", "request body must be multipart/form-data with a boundary in its content type")
	}
	var (
		req      format.Request
		own      = &Fields{ResponseFormat: "json"}
		seen     = map[string]bool{}
		haveFile bool
	)
	mr := multipart.NewReader(bytes.NewReader(body), params["boundary"])
	for {
		// NextRawPart: the form's parts as sent, with no transfer decoding
		// the vendor would not do.
		p, err := mr.NextRawPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			return format.Request{}, malformed(err)
		}
		name := p.FormName()
		kind, err := partKind(name)
		if err != nil {
			return format.Request{}, err
		}
		switch kind {
		case partFile:
			if haveFile {
				return format.Request{}, format.Invalid("file", "file: only one file may be sent")
			}
			n, err := io.Copy(io.Discard, p)
			if err != nil {
				return format.Request{}, malformed(err)
			}
			own.FileBytes, haveFile = n, true
			continue
		case partPrompt:
			n, err := io.Copy(io.Discard, p)
			if err != nil {
				return format.Request{}, malformed(err)
			}
			own.PromptBytes += n
			continue
		case partField:
		default:
			if _, err := io.Copy(io.Discard, p); err != nil {
				return format.Request{}, malformed(err)
			}
			continue
		}
		if seen[name] {
			return format.Request{}, format.Invalid(name, name+": appears more than once in the form")
		}
		seen[name] = true
		v, err := io.ReadAll(io.LimitReader(p, fieldLimit+1))
		if err != nil {
			return format.Request{}, malformed(err)
		}
		if len(v) > fieldLimit {
			return format.Request{}, format.Invalid(name, name+": longer than "+strconv.Itoa(fieldLimit)+" bytes")
		}
		if err := readField(name, string(v), &req, own); err != nil {
			return format.Request{}, err
		}
	}
	switch {
	case req.Model == "":
		return format.Request{}, format.Missing("model")
	case !haveFile:
		return format.Request{}, format.Missing("file")
	}
	if !slices.Contains(billable, own.ResponseFormat) {
		return format.Request{}, format.Invalid("response_format", "response_format: "+strconv.Quote(own.ResponseFormat)+
			" is not available through this gateway: its replies carry no usage to bill from; use json, verbose_json or diarized_json")
	}
	req.Own = own
	return req, nil
}

// malformed is the refusal of a body that does not parse as a multipart
// form. The parser's message names the fault, never the content.
func malformed(err error) *format.Error {
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return format.Invalid("", "request body is not a valid multipart/form-data body: it ends before its closing boundary")
	}
	return format.Invalid("", "request body is not a valid multipart/form-data body: "+err.Error())
}
