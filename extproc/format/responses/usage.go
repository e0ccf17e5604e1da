package responses

import (
	"github.com/modelgateway/gateway/extproc/jsonscan"
	"github.com/modelgateway/gateway/internal/usage"
)

// The usage object of a response, as paths below "usage":
//
//	input_tokens                           all input, cached included
//	output_tokens                          all output, reasoning included
//	input_tokens_details.cached_tokens     input read from the cache
//	output_tokens_details.reasoning_tokens reasoning, inside output_tokens
const (
	uInput = iota
	uOutput
	uCached
	uReasoning
	uFields
)

var usageFields = [uFields]string{
	"input_tokens",
	"output_tokens",
	"input_tokens_details.cached_tokens",
	"output_tokens_details.reasoning_tokens",
}

// usagePathsUnder returns the usage paths below prefix ("usage." or
// "response.usage.").
func usagePathsUnder(prefix string) []string {
	out := make([]string, uFields)
	for i, f := range usageFields {
		out[i] = prefix + f
	}
	return out
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

// complete reports whether both totals were read.
func (u *vendorUsage) complete() bool { return u.seen[uInput] && u.seen[uOutput] }

// usage splits the vendor's inclusive figures into kinds that do not
// overlap; details larger than their totals are capped.
func (u *vendorUsage) usage() usage.Usage {
	in, out := u.n[uInput], u.n[uOutput]
	cached := min(u.n[uCached], in)
	return usage.Usage{
		Input:     in - cached,
		CacheRead: cached,
		Output:    out,
		Reasoning: min(u.n[uReasoning], out),
	}
}

// count returns a non-negative integer count.
func count(v jsonscan.Value) (int64, bool) {
	n, ok := v.Int()
	if !ok || n < 0 {
		return 0, false
	}
	return n, true
}

// maxContainers bounds the distinct code interpreter containers one reply
// is counted with; a reply naming more is charged for this many.
const maxContainers = 64

// toolCalls counts the built-in tool calls of a reply's output items: the
// calls the vendor made, whatever tools the request offered. Code
// interpreter is billed per session (container), so its calls are counted
// by distinct container.
type toolCalls struct {
	webSearches, fileSearches, images int64
	containers                        []string
}

// item counts one output item of the given type; container is its
// container_id (Kind Invalid when absent).
func (c *toolCalls) item(typ jsonscan.Value, container jsonscan.Value) {
	switch {
	case typ.Equal("web_search_call"):
		c.webSearches++
	case typ.Equal("file_search_call"):
		c.fileSearches++
	case typ.Equal("image_generation_call"):
		c.images++
	case typ.Equal("code_interpreter_call"):
		id := ""
		if container.Kind == jsonscan.String {
			id = container.Text()
		}
		for _, have := range c.containers {
			if have == id {
				return
			}
		}
		if len(c.containers) < maxContainers {
			c.containers = append(c.containers, id)
		}
	}
}

// add records the counts in u.
func (c *toolCalls) add(u *usage.Usage) {
	u.WebSearches = c.webSearches
	u.FileSearches = c.fileSearches
	u.ImageGenerations = c.images
	u.CodeInterpreter = int64(len(c.containers))
}
