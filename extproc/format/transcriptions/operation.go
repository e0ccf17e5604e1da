package transcriptions

import (
	"github.com/modelgateway/gateway/extproc/format"
	"github.com/modelgateway/gateway/extproc/operation"
	"github.com/modelgateway/gateway/internal/pricing"
)

// Operation is OpenAI's audio transcriptions. The vendor keeps nothing it
// produces: there are no stored objects and no other routes.
var Operation = operation.Operation{
	Name: "audio_transcriptions", API: "chat_completions", Format: Format{}, Modes: []string{"audio_transcription"},
	Paths: []operation.Path{{Method: "POST", Path: "/v1/audio/transcriptions"}},
	// OpenTelemetry's GenAI conventions have no transcription operation;
	// generate_content is theirs for multimodal content generation.
	GenAI:  operation.GenAI{Operation: "generate_content", Provider: "openai"},
	Bounds: Bounds,
}

// minBytesPerSecond is the lowest bitrate of audio the hold assumes: 4
// kbit/s, below every encoding the vendor accepts at speech quality (MP3
// from 8 kbit/s, Opus from 6). An upload can therefore hold at most its
// size ÷ 500 seconds of audio.
const minBytesPerSecond = 500

// maxAudioTokensPerSecond bounds the audio tokens one second of audio
// becomes: the vendors' audio models use about 10 a second; 50 leaves room.
const maxAudioTokensPerSecond = 50

// secondsBound is the most audio, in whole seconds, an upload of n bytes
// can hold.
func secondsBound(n int64) int64 { return (n + minBytesPerSecond - 1) / minBytesPerSecond }

// audioTokenBound is the most audio tokens an upload of n bytes can
// become.
func audioTokenBound(n int64) int64 { return secondsBound(n) * maxAudioTokensPerSecond }

// Bounds is the transcription hold rule, from the upload's size and the
// model's limits, never from the body's bytes as text (the audio is most
// of the body, and far fewer tokens than bytes).
//
// A model the catalogue prices by duration alone (a per-second price, no
// token input price) is held for the most seconds the upload can hold
// (secondsBound), and no tokens. Any other model is held for tokens: input
// the most audio tokens the upload can become plus the prompt at a token
// per byte, at most the model's input window; output the model's maximum
// output (operation.DefaultHoldOutput when the catalogue gives none).
//
// The rule also records, in the request's Fields, which of the two the
// model is billed by, for the meter's estimate of a reply without usage.
func Bounds(price *pricing.Model, req format.Request, _ []byte) operation.Bounds {
	own, _ := req.Own.(*Fields)
	if own == nil {
		own = &Fields{}
	}
	if price.HasPrice("audio_seconds") && !price.HasPrice("input") && !price.HasPrice("audio_input") {
		own.ByDuration = true
		return operation.Bounds{Seconds: secondsBound(own.FileBytes)}
	}
	input := audioTokenBound(own.FileBytes) + own.PromptBytes
	if price.MaxInput > 0 {
		input = min(input, price.MaxInput)
	}
	return operation.Bounds{Input: input, Output: operation.OutputBound(price, req)}
}
