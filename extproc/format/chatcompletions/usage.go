package chatcompletions

import (
	"github.com/modelgateway/gateway/extproc/jsonscan"
	"github.com/modelgateway/gateway/internal/usage"
)

// The usage object of a completion, as paths below "usage":
//
//	prompt_tokens                              all input, cached and audio included
//	completion_tokens                          all output, reasoning and audio included
//	prompt_tokens_details.cached_tokens        input read from the cache
//	prompt_tokens_details.audio_tokens         audio input
//	completion_tokens_details.reasoning_tokens reasoning, inside completion_tokens
//	completion_tokens_details.audio_tokens     audio output
const (
	uPrompt = iota
	uCompletion
	uCached
	uAudioIn
	uReasoning
	uAudioOut
	uFields
)

var usagePaths = [uFields]string{
	"usage.prompt_tokens",
	"usage.completion_tokens",
	"usage.prompt_tokens_details.cached_tokens",
	"usage.prompt_tokens_details.audio_tokens",
	"usage.completion_tokens_details.reasoning_tokens",
	"usage.completion_tokens_details.audio_tokens",
}

// vendorUsage holds the figures of one usage object.
type vendorUsage struct {
	n    [uFields]int64
	seen [uFields]bool
}

func (u *vendorUsage) set(i int, v jsonscan.Value) {
	if n, ok := count(v); ok {
		u.n[i], u.seen[i] = n, true
	}
}

// usage splits the vendor's inclusive figures into kinds that do not
// overlap: cached and audio input out of the prompt, audio output out of the
// completion. Reasoning stays inside output and is recorded as well.
// Inconsistent figures (details larger than their total) are capped, never
// negative.
func (u *vendorUsage) usage(webSearch bool) usage.Usage {
	prompt, completion := u.n[uPrompt], u.n[uCompletion]
	cached := min(u.n[uCached], prompt)
	audioIn := min(u.n[uAudioIn], prompt-cached)
	audioOut := min(u.n[uAudioOut], completion)
	out := usage.Usage{
		Input:       prompt - cached - audioIn,
		CacheRead:   cached,
		AudioInput:  audioIn,
		Output:      completion - audioOut,
		AudioOutput: audioOut,
		Reasoning:   min(u.n[uReasoning], completion),
	}
	if webSearch {
		out.WebSearches = 1
	}
	return out
}
