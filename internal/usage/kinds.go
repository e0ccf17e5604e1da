package usage

import "strconv"

// This file declares the usage kinds, once: every other list of them (the
// hold's sides, the usage cap, prices and the catalogue fields read, the
// operator's price fields, the usage report's quantities, the counters of
// tokens, the ledger sink's columns) is derived from Kinds, or pinned to it
// by a test that fails until it agrees. Adding a kind is a field of Usage,
// its case in Usage.field and its line in Kinds, all in this file.

// Usage is what one reply consumed. Every field is a count of tokens, except
// the built-in tool calls (WebSearches, FileSearches, CodeInterpreter,
// ImageGenerations), counts of calls or sessions, AudioSeconds, whole
// seconds of input audio for models priced by duration, and Images; Kinds
// (kinds.go) declares each one's name, side, unit and prices.
//
// The kinds do not overlap, so that each is priced once: Input excludes cache
// reads, cache writes, audio and image-generation image tokens; Output
// excludes audio and image output. Reasoning is the exception: it is part of
// Output (vendors bill it as output) and is recorded only so that it can be
// shown.
type Usage struct {
	Input        int64 // text input (and a chat prompt's images), not cached
	Output       int64 // text output, reasoning included
	CacheRead    int64 // input read from the prompt cache
	CacheWrite5m int64 // input written to the cache for 5 minutes
	CacheWrite1h int64 // input written to the cache for 1 hour
	AudioInput   int64
	AudioOutput  int64
	Reasoning    int64 // part of Output; recorded, not priced on its own
	WebSearches  int64 // server-side web searches (requests, not tokens)
	// Built-in tools of the responses operation, counted from the calls the
	// vendor reports having made.
	FileSearches     int64 // file_search calls
	CodeInterpreter  int64 // code interpreter sessions (distinct containers)
	ImageGenerations int64 // image_generation calls
	// AudioSeconds is input audio measured by duration, in whole seconds
	// (a fraction rounds up), for models the vendor bills per second
	// rather than per token; never also counted as AudioInput.
	AudioSeconds int64
	// Image generation: prompt images as input tokens, generated images
	// as output tokens, or whole images for models priced per image.
	ImageInput  int64 // image input tokens, never also counted as Input
	ImageOutput int64 // image output tokens, never also counted as Output
	Images      int64 // images generated, for models priced per image
}

// Side is the side of a request a token kind is on: the hold prices the
// input side at the dearest input price and the output side at the dearest
// output price, and caps each side's sum at the request's bounds.
type Side int

const (
	// SideNone: the kind is not tokens; it is held and capped by its count
	// (Unit says which).
	SideNone Side = iota
	// SideInput: the prompt's tokens, what long-context tiers measure.
	SideInput
	// SideOutput: the reply's tokens.
	SideOutput
)

// Unit is what one unit of a kind is; prices are per million units.
type Unit int

const (
	Token Unit = iota
	// Call is one built-in tool call or session, held per call.
	Call
	// Second is a whole second of input audio.
	Second
	// Image is one image generated, for models priced per image.
	Image
)

// Kind is one field of Usage.
type Kind struct {
	// Name is the field's name in Redis counters, ledger entries and JSON.
	// It never contains a colon.
	Name string
	Side Side
	Unit Unit
	// Within names the kind that contains this one (reasoning is part of
	// output): it is recorded to be shown, never priced or capped on its
	// own. Empty for the priced kinds.
	Within string
	// Else names the kind whose price applies when a model has none of
	// this kind's own, so that usage is never free by omission; empty: no
	// price is no charge.
	Else string
	// Catalogue are the catalogue's price fields of the kind, before any
	// long-context ("_above_200k_tokens") or tier ("_priority") suffix;
	// of several an entry gives, the first listed prices the kind.
	Catalogue []string
	// Config is the kind's field in an operator's price (config.Price);
	// empty for a kind without one.
	Config string
	// Alone: a price of this kind alone makes a catalogue entry a model
	// (priced by duration or per image); other kinds need a price of each
	// side.
	Alone bool
	field int // the field's index, for Usage.field
}

// Priced reports whether the kind is priced on its own (it is not Within
// another).
func (k Kind) Priced() bool { return k.Within == "" }

// Column is the kind's name as a quantity: the ledger sink's column and
// the usage report's JSON field (input_tokens, web_searches).
func (k Kind) Column() string {
	if k.Unit == Token {
		return k.Name + "_tokens"
	}
	return k.Name
}

// Kinds lists every field of Usage, in a fixed order (the order of the
// ledger sink's columns and of the usage report's fields).
var Kinds = []Kind{
	{Name: "input", Side: SideInput, Catalogue: []string{"input_cost_per_token"}, Config: "input", field: 0},
	{Name: "output", Side: SideOutput, Catalogue: []string{"output_cost_per_token"}, Config: "output", field: 1},
	{Name: "cache_read", Side: SideInput, Else: "input", Catalogue: []string{"cache_read_input_token_cost"}, Config: "cache_read", field: 2},
	{Name: "cache_write_5m", Side: SideInput, Else: "input", Catalogue: []string{"cache_creation_input_token_cost"}, Config: "cache_write_5m", field: 3},
	// "above_1hr" is part of the field's name, not a long-context tier.
	{Name: "cache_write_1h", Side: SideInput, Else: "cache_write_5m", Catalogue: []string{"cache_creation_input_token_cost_above_1hr"}, Config: "cache_write_1h", field: 4},
	{Name: "audio_input", Side: SideInput, Else: "input", Catalogue: []string{"input_cost_per_audio_token"}, Config: "audio_input", field: 5},
	{Name: "audio_output", Side: SideOutput, Else: "output", Catalogue: []string{"output_cost_per_audio_token"}, Config: "audio_output", field: 6},
	{Name: "reasoning", Side: SideOutput, Within: "output", field: 7},
	// Priced per query at the medium search context size (the
	// catalogue's search_context_cost_per_query object).
	{Name: "web_searches", Unit: Call, Catalogue: []string{"search_context_cost_per_query"}, Config: "web_search", field: 8},
	{Name: "file_searches", Unit: Call, Config: "file_search", field: 9},
	// Priced for every model of a provider by its PROVIDER/container entry.
	{Name: "code_interpreter_sessions", Unit: Call, Catalogue: []string{"code_interpreter_cost_per_session"}, Config: "code_interpreter_session", field: 10},
	{Name: "image_generations", Unit: Call, Config: "image_generation", field: 11},
	{Name: "audio_seconds", Unit: Second, Catalogue: []string{"input_cost_per_second"}, Config: "audio_seconds", Alone: true, field: 12},
	{Name: "image_input", Side: SideInput, Else: "input", Catalogue: []string{"input_cost_per_image_token"}, Config: "image_input", field: 13},
	{Name: "image_output", Side: SideOutput, Else: "output", Catalogue: []string{"output_cost_per_image_token"}, Config: "image_output", field: 14},
	// An image generated: the catalogue's output_cost_per_image, or, for
	// an entry without one (OpenAI's sized entries), its
	// input_cost_per_image; where an entry gives both, the input price is
	// per prompt image, which no reply the meters read reports.
	{Name: "images", Unit: Image, Catalogue: []string{"output_cost_per_image", "input_cost_per_image"}, Config: "images", Alone: true, field: 15},
}

// field returns the address of field i. A switch rather than a function
// per kind: the compiler then sees that u does not escape, and reading a
// kind allocates nothing (this runs for every kind of every request).
func (u *Usage) field(i int) *int64 {
	switch i {
	case 0:
		return &u.Input
	case 1:
		return &u.Output
	case 2:
		return &u.CacheRead
	case 3:
		return &u.CacheWrite5m
	case 4:
		return &u.CacheWrite1h
	case 5:
		return &u.AudioInput
	case 6:
		return &u.AudioOutput
	case 7:
		return &u.Reasoning
	case 8:
		return &u.WebSearches
	case 9:
		return &u.FileSearches
	case 10:
		return &u.CodeInterpreter
	case 11:
		return &u.ImageGenerations
	case 12:
		return &u.AudioSeconds
	case 13:
		return &u.ImageInput
	case 14:
		return &u.ImageOutput
	case 15:
		return &u.Images
	}
	panic("usage: no field " + strconv.Itoa(i))
}

// Of returns the kind's quantity in u.
func (k Kind) Of(u Usage) int64 { return *u.field(k.field) }

// Set stores n as the kind's quantity in u.
func (k Kind) Set(u *Usage, n int64) { *u.field(k.field) = n }

// Index is the kind's position in Kinds, for tables indexed by kind.
func (k Kind) Index() int { return k.field }

// KindNamed returns the kind called name.
func KindNamed(name string) (Kind, bool) {
	for _, k := range Kinds {
		if k.Name == name {
			return k, true
		}
	}
	return Kind{}, false
}
