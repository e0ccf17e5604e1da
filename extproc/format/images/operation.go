package images

import (
	"github.com/modelgateway/gateway/extproc/format"
	"github.com/modelgateway/gateway/extproc/operation"
	"github.com/modelgateway/gateway/internal/pricing"
)

// Operation is OpenAI's image generation. The vendor keeps nothing it
// produces: there are no stored objects and no other routes.
var Operation = operation.Operation{
	Name: "image_generations", API: "chat_completions", Format: Format{}, Modes: []string{"image_generation"},
	Paths: []operation.Path{{Method: "POST", Path: "/v1/images/generations"}},
	// OpenTelemetry's GenAI conventions have no image operation;
	// generate_content is theirs for multimodal content generation.
	GenAI:  operation.GenAI{Operation: "generate_content", Provider: "openai"},
	Bounds: Bounds,
}

// minPixelsPerToken bounds the image tokens an image of a given size can
// be billed for: the vendor's image models bill about 250 pixels a token
// at their highest quality (4,160 tokens for 1024×1024); 64 leaves room
// for a dearer quality.
const minPixelsPerToken = 64

// minImageTokens is the least output an image is held for, whatever its
// size: a size of "auto" (or none) is held as this many tokens.
const minImageTokens = 1 << 15

// partialImageTokens is what each partial image of a stream adds to an
// image's output, as the vendor bills it (100 tokens).
const partialImageTokens = 100

// Bounds is the image generation hold rule: the prompt at a token per byte
// as input (the body's bytes); as output, for each of the n images, its
// size's most image tokens (minImageTokens at least) and its partial
// images'; and the n images, for a model priced per image.
//
// The rule also records, in the request's Fields, whether the model is
// priced per image, for the meter's count of a reply without usage.
func Bounds(price *pricing.Model, req format.Request, body []byte) operation.Bounds {
	own, _ := req.Own.(*Fields)
	if own == nil {
		own = &Fields{N: 1}
	}
	own.PerImage = price.HasPrice("images") && !price.HasPrice("image_output")
	own.OutputBound = own.N * (max(minImageTokens, own.Pixels/minPixelsPerToken) + own.Partials*partialImageTokens)
	return operation.Bounds{Input: int64(len(body)), Output: own.OutputBound, Images: own.N}
}
