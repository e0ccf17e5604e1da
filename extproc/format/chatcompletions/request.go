package chatcompletions

import (
	"bytes"
	"cmp"
	"strconv"

	"github.com/modelgateway/gateway/extproc/format"
	"github.com/modelgateway/gateway/extproc/jsonscan"
	"github.com/modelgateway/gateway/extproc/tokens"
)

const (
	reqModel = iota
	reqMaxTokens
	reqMaxCompletionTokens
	reqStream
	reqStreamOptions
	reqIncludeUsage
	reqN
	reqTools
	reqFunctions
	reqWebSearch
	reqCacheKey
	reqUser
	reqMessage // a message, after its fields
	reqPart
	reqFileID
	reqAudio
	reqAudioID
)

// maxChoices is the largest n the vendor accepts.
const maxChoices = 128

var requestQuery = jsonscan.NewQuery(
	"model",
	"max_tokens",
	"max_completion_tokens",
	"stream",
	"stream_options",
	"stream_options.include_usage",
	"n",
	"tools",
	"functions",
	"web_search_options",
	"prompt_cache_key",
	"user",
	"messages[]",
	"messages[].content[]",
	"messages[].content[].file.file_id",
	"messages[].audio",
	"messages[].audio.id",
)

// storedRefs reads the ids of vendor objects a body names (a file part's
// file id, an assistant message's audio id), none of which an account can
// own: the first is refused (unbound).
type storedRefs struct {
	message, part int // messages, and parts of this message, read
	unbound       *format.Error
}

func (r *storedRefs) visit(path int, v jsonscan.Value, check *format.RequestCheck) {
	switch path {
	case reqMessage:
		r.message, r.part = r.message+1, 0
	case reqPart:
		r.part++
	case reqFileID:
		r.never("File", "messages["+strconv.Itoa(r.message)+"].content["+strconv.Itoa(r.part)+"].file.file_id", fileInstead, v, check)
	case reqAudioID:
		r.never("Audio", "messages["+strconv.Itoa(r.message)+"].audio.id", audioInstead, v, check)
	case reqAudio:
		if v.Kind != jsonscan.Object && v.Kind != jsonscan.Null {
			check.Fail("messages["+strconv.Itoa(r.message)+"].audio", "must be an object")
		}
	}
}

// never refuses the object v names (an id at param), unless a refusal was
// recorded already.
func (r *storedRefs) never(noun, param, instead string, v jsonscan.Value, check *format.RequestCheck) {
	switch {
	case v.Kind == jsonscan.Null || r.unbound != nil:
	case v.Kind != jsonscan.String || len(v.Raw) == 2 || len(v.Raw) > maxIDBytes:
		check.Fail(param, "must be an id")
	default:
		r.unbound = format.NotStored(param, noun, v.Text(), instead)
	}
}

// ParseRequest reads model, max_tokens, max_completion_tokens, stream and
// stream_options.include_usage, validating the whole body as strict JSON.
// For a stream whose client did not ask for usage, Request.Edit sets
// stream_options.include_usage (see usageEdit).
//
// model is required. The token limits are optional integers from 1 to
// 2^31-1 (integral values written as 1e3 or 100.0 are accepted, as the
// vendor's parser accepts them). max_tokens is the older name of
// max_completion_tokens; when a body carries both, MaxTokens is the larger,
// so admission reserves for the worst case whichever one the vendor
// applies. Optional fields may be null, which means absent. Repeated keys on
// any of these paths are rejected.
//
// A body naming an object the vendor keeps, which the gateway never binds
// to an account, is refused with 404 as the vendor answers an id it does
// not know (after any 400): a file (a content part's file.file_id) or an
// earlier audio reply (an assistant message's audio.id).
func (Format) ParseRequest(body []byte, _ string) (format.Request, error) {
	var req format.Request
	var haveModel bool
	var opts, usage jsonscan.Value // Kind Invalid when absent
	var check format.RequestCheck
	var refs storedRefs
	var cacheKey, user string // session markers, the first preferred
	err := requestQuery.Scan(body, func(path int, v jsonscan.Value) error {
		switch path {
		case reqModel:
			req.Model, haveModel = check.Model(v)
		case reqMaxTokens, reqMaxCompletionTokens:
			name := "max_tokens"
			if path == reqMaxCompletionTokens {
				name = "max_completion_tokens"
			}
			if v.Kind == jsonscan.Null {
				return nil
			}
			if n, ok := check.TokenLimit(name, v); ok {
				req.MaxTokens, req.HasMaxTokens = max(req.MaxTokens, n), true
			}
		case reqStream:
			req.Stream = check.Bool("stream", v)
		case reqCacheKey:
			cacheKey = format.SessionText(v)
		case reqUser:
			user = format.SessionText(v)
		case reqWebSearch:
			// The search models run one search per request that asks for
			// it; the reply's usage does not count searches.
			req.WebSearch = v.Kind == jsonscan.Object
		case reqStreamOptions:
			if v.Kind != jsonscan.Object && v.Kind != jsonscan.Null {
				check.Fail("stream_options", "must be an object")
			}
			opts = v
		case reqIncludeUsage:
			req.IncludeUsage = check.Bool("stream_options.include_usage", v)
			usage = v
		case reqN:
			if v.Kind == jsonscan.Null {
				return nil
			}
			n, ok := v.Int()
			if !ok || n < 1 || n > maxChoices {
				check.Fail("n", "must be an integer from 1 to 128")
				return nil
			}
			req.Choices = n
		case reqTools, reqFunctions:
			if v.Kind == jsonscan.Array && format.NonEmptyArray(v.Raw) {
				req.HasTools = true
			}
		default:
			refs.visit(path, v, &check)
		}
		return nil
	})
	switch err := check.Err(body, err); {
	case err != nil:
		return format.Request{}, err
	case !haveModel:
		return format.Request{}, format.Missing("model")
	case refs.unbound != nil:
		return format.Request{}, refs.unbound
	}
	req.Session = cmp.Or(cacheKey, user)
	if req.Stream && !req.IncludeUsage {
		req.Edit = usageEdit(body, opts, usage)
	}
	return req, nil
}

// maxIDBytes bounds an id the gateway repeats in an error.
const maxIDBytes = 128

// What a client sends instead of an object the gateway never binds.
const (
	fileInstead = "Files are not available through this gateway: send the file's content in the request " +
		"(file.file_data, or an image as a data URL in image_url)."
	audioInstead = "Earlier audio replies are not available by id through this gateway: " +
		"send the assistant's earlier reply as text content (its transcript)."
)

// usageEdit sets stream_options.include_usage to true in a valid request
// body, given the values scanned at stream_options and at its include_usage
// (Kind Invalid when absent). Without it the vendor reports no usage on a
// stream, and reasoning tokens, which the reply's text does not show, could
// only be guessed. Every other byte stays as the client sent it:
//
//	include_usage false or null  the value becomes true
//	stream_options {...}         "include_usage":true is added first in it
//	stream_options null          the value becomes {"include_usage":true}
//	no stream_options            it is added after the last member
func usageEdit(body []byte, opts, usage jsonscan.Value) format.Edit {
	switch {
	case usage.Kind != jsonscan.Invalid:
		return format.Edit{At: offsetOf(body, usage), Cut: len(usage.Raw), Insert: "true"}
	case opts.Kind == jsonscan.Object:
		e := format.Edit{At: offsetOf(body, opts) + 1, Insert: `"include_usage":true,`}
		if bytes.TrimLeft(opts.Raw[1:], jsonSpace)[0] == '}' {
			e.Insert = `"include_usage":true` // the object was empty
		}
		return e
	case opts.Kind == jsonscan.Null:
		return format.Edit{At: offsetOf(body, opts), Cut: len(opts.Raw), Insert: `{"include_usage":true}`}
	}
	// The body is an object with at least "model": after its last member
	// comes only space and the closing brace.
	end := len(bytes.TrimRight(body, jsonSpace)) - 1
	last := len(bytes.TrimRight(body[:end], jsonSpace))
	return format.Edit{At: last, Insert: `,"stream_options":{"include_usage":true}`}
}

const jsonSpace = " \t\r\n"

// offsetOf returns where v, scanned from body, starts in it: a Value's Raw
// is a slice of the scanned input, so the capacities tell.
func offsetOf(body []byte, v jsonscan.Value) int {
	return cap(body) - cap(v.Raw)
}

// inputTextLimit bounds the request text tokenized for an input estimate;
// the rest is extrapolated. Tokenizing costs about a third of a microsecond
// per byte.
const inputTextLimit = 64 << 10

// Per-message overhead of the vendor's chat template, from the vendor's
// published counting recipe: each message costs about three tokens beyond
// its content, and the reply is primed with three more.
const (
	tokensPerMessage = 3
	tokensPerReply   = 3
)

const (
	txtMessage = iota
	txtContent
	txtPartText
	txtToolName
	txtToolArgs
	txtTool
)

var requestTextQuery = jsonscan.NewQuery(
	"messages[]",
	"messages[].content",
	"messages[].content[].text",
	"messages[].tool_calls[].function.name",
	"messages[].tool_calls[].function.arguments",
	"tools[]",
)

// estimateInput counts the prompt tokens of a request body: message content
// strings and text parts, earlier tool calls, tool definitions, and the
// chat template's per-message overhead. Images and audio are not counted.
// Used when the reply carries no usage.
func estimateInput(body []byte) int64 {
	t := tokens.Tally{Limit: inputTextLimit}
	var messages int64
	_ = requestTextQuery.Scan(body, func(path int, v jsonscan.Value) error {
		switch {
		case path == txtMessage:
			messages++
		case path == txtTool:
			t.Write(v.Raw)
			t.Write(newline)
		case v.Kind == jsonscan.String:
			t.Write(v.AppendText(nil))
			t.Write(newline)
		}
		return nil
	})
	return t.Tokens() + tokensPerMessage*messages + tokensPerReply
}

var newline = []byte{'\n'}
