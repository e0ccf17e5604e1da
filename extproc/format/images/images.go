// Package images implements the "image_generations" wire format: OpenAI's
// image generation (POST /v1/images/generations), served on
// /beta/v1/images/generations. Replies of the GPT image models carry
// usage in tokens: text input as input, image input and output as image
// tokens (usage.Kinds' image_input and image_output), text output, when
// reported, as output. Models priced per image (the dall-e models, where
// priced) report no usage: each image the reply carries is billed.
package images

import (
	"strconv"
	"strings"

	"github.com/modelgateway/gateway/extproc/format"
	"github.com/modelgateway/gateway/extproc/format/chatcompletions"
	"github.com/modelgateway/gateway/extproc/jsonscan"
)

// Format is the "image_generations" format. The zero value is ready to
// use.
type Format struct{}

var _ format.Format = Format{}

// Name returns "image_generations".
func (Format) Name() string { return "image_generations" }

// ErrorBody renders an error as the vendor does on every path of its API.
func (Format) ErrorBody(e *format.Error) []byte { return chatcompletions.Format{}.ErrorBody(e) }

// Fields are what the hold rule and the meter need of a request.
type Fields struct {
	N        int64 // images asked for, 1 when not given
	Pixels   int64 // width × height of a WxH size; 0 for "auto" or none
	Partials int64 // partial images per image of a stream
	// Set by Bounds: the model is priced per image (and not by image
	// tokens), and the most
	// output tokens the request is held for.
	PerImage    bool
	OutputBound int64
}

// defaultModel is the model the vendor uses when the request names none.
const defaultModel = "dall-e-2"

// The vendor's bounds on n and partial_images.
const (
	maxImages   = 10
	maxPartials = 3
)

var requestQuery = jsonscan.NewQuery("model", "prompt", "n", "size", "stream", "partial_images", "user")

// ParseRequest reads model (the vendor's default when absent), prompt
// (required), n, size, stream and partial_images, validating the whole
// body as strict JSON.
func (Format) ParseRequest(body []byte, _ string) (format.Request, error) {
	req := format.Request{Model: defaultModel}
	own := &Fields{N: 1}
	var havePrompt bool
	var check format.RequestCheck
	err := requestQuery.Scan(body, func(path int, v jsonscan.Value) error {
		switch path {
		case 0:
			req.Model, _ = check.Model(v)
		case 1:
			havePrompt = v.Kind == jsonscan.String && len(v.Raw) > 2
			if !havePrompt {
				check.Fail("prompt", "must be a non-empty string")
			}
		case 2:
			if v.Kind != jsonscan.Null {
				n, ok := v.Int()
				if !ok || n < 1 || n > maxImages {
					check.Fail("n", "must be an integer from 1 to 10")
				}
				own.N = n
			}
		case 3:
			if v.Kind == jsonscan.String {
				own.Pixels = pixels(v.Text())
			} else if v.Kind != jsonscan.Null {
				check.Fail("size", "must be a string")
			}
		case 4:
			req.Stream = check.Bool("stream", v)
		case 5:
			if v.Kind != jsonscan.Null {
				n, ok := v.Int()
				if !ok || n < 0 || n > maxPartials {
					check.Fail("partial_images", "must be an integer from 0 to 3")
				}
				own.Partials = n
			}
		case 6:
			req.Session = format.SessionText(v)
		}
		return nil
	})
	switch err := check.Err(body, err); {
	case err != nil:
		return format.Request{}, err
	case !havePrompt:
		return format.Request{}, format.Missing("prompt")
	}
	if !req.Stream {
		own.Partials = 0 // partial images are streamed only
	}
	req.Own = own
	return req, nil
}

// maxSide bounds a side of an image size the hold believes.
const maxSide = 1 << 14

// pixels reads a "WIDTHxHEIGHT" size; 0 for anything else ("auto").
func pixels(size string) int64 {
	w, h, ok := strings.Cut(size, "x")
	if !ok {
		return 0
	}
	wn, err1 := strconv.ParseInt(w, 10, 64)
	hn, err2 := strconv.ParseInt(h, 10, 64)
	if err1 != nil || err2 != nil || wn <= 0 || hn <= 0 || wn > maxSide || hn > maxSide {
		return 0
	}
	return wn * hn
}
