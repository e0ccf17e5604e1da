package responses

import (
	"strconv"

	"github.com/modelgateway/gateway/extproc/format"
	"github.com/modelgateway/gateway/extproc/jsonscan"
)

// The stored objects a request names. Behind the gateway every account
// shares one vendor key, and the vendor serves whatever the key owns to
// whoever names its id: every id a body names is either bound to the
// requesting account (a stored response, an item of one) or refused.
//
//	previous_response_id,                      a stored response (Ref)
//	prompt_cache_options.comparison_response_id
//	input[] with an id and no content of its   an item of a stored
//	  own (see isReference), input[]             response (Ref)
//	  .approval_request_id
//	input[].content[].file_id,                 a file (never bound: 404)
//	  input[].output[].file_id, input[].output.file_id,
//	  tools[].container.file_ids, tools[].environment.file_ids,
//	  tools[].input_image_mask.file_id
//	tools[].vector_store_ids                   a vector store (404)
//	tools[].container (a string),              a container (404)
//	  tools[].environment.container_id, input[].environment.container_id
//	tools[].….skills[].skill_id                a skill (404)
//	prompt.id                                  a stored prompt (404)
//	conversation, conversation.id              a conversation (404)
//
// Files, vector stores, containers, skills, prompts and conversations are
// made on vendor paths the gateway does not serve, so no account can own
// one: naming one is answered 404, as the vendor answers an id it does not
// know, with what to send instead.

const (
	refComparison = iota
	refConversation
	refConversationID
	refPrompt
	refPromptID
	refItem // an input item, after its fields
	refItemType
	refItemID
	refItemContent
	refItemArguments
	refItemOutput
	refItemInput
	refItemEncrypted
	refItemApprove
	refItemApproval
	refPart
	refPartFile
	refOutputPart
	refOutputPartFile
	refOutputFile
	refItemContainer
	refTool // a tool, after its fields
	refVectorStore
	refVectorStores
	refContainer
	refContainerFile
	refContainerFiles
	refContainerSkill
	refEnvContainer
	refEnvFile
	refEnvFiles
	refEnvSkill
	refMaskFile
)

// refPaths follow the request's own paths in requestQuery, in the order
// above.
var refPaths = []string{
	"prompt_cache_options.comparison_response_id",
	"conversation",
	"conversation.id",
	"prompt",
	"prompt.id",
	"input[]",
	"input[].type",
	"input[].id",
	"input[].content",
	"input[].arguments",
	"input[].output",
	"input[].input",
	"input[].encrypted_content",
	"input[].approve",
	"input[].approval_request_id",
	"input[].content[]",
	"input[].content[].file_id",
	"input[].output[]",
	"input[].output[].file_id",
	"input[].output.file_id",
	"input[].environment.container_id",
	"tools[]",
	"tools[].vector_store_ids[]",
	"tools[].vector_store_ids",
	"tools[].container",
	"tools[].container.file_ids[]",
	"tools[].container.file_ids",
	"tools[].container.skills[].skill_id",
	"tools[].environment.container_id",
	"tools[].environment.file_ids[]",
	"tools[].environment.file_ids",
	"tools[].environment.skills[].skill_id",
	"tools[].input_image_mask.file_id",
}

// MaxRefs bounds the stored objects one request may name by id: each is
// a lookup before the request is admitted.
const MaxRefs = 256

// An object is a kind of vendor object the gateway never binds.
type object uint8

const (
	file object = iota
	vectorStore
	container
	skill
	prompt
	conversation
)

// objects are the vendor's name of each (as its not-found errors say) and
// what a client sends instead.
var objects = [...]struct{ noun, id, instead string }{
	file: {"File", "a file id", "Files are not available through this gateway: send the file's content in the request " +
		"(input_file's file_data, an image as a data URL in image_url)."},
	vectorStore: {"Vector store", "a vector store id", "Vector stores are not available through this gateway: " +
		"send the passages the model needs in the input, or offer a function tool that searches your own store."},
	container: {"Container", "a container id", `Containers are not available through this gateway: ` +
		`use "container": {"type": "auto"} without file_ids, and send the files' content in the input.`},
	skill: {"Skill", "a skill id", `Stored skills are not available through this gateway: send the skill inline ("type": "inline").`},
	prompt: {"Prompt", "a prompt id", "Stored prompts are not available through this gateway: " +
		"send the instructions and the input themselves."},
	conversation: {"Conversation", "a conversation id", "Conversations are not available through this gateway: " +
		"continue a response with previous_response_id, or send the earlier items in the input."},
}

// Content fields an input item may carry (contentOf).
const (
	hasContent = 1 << iota
	hasArguments
	hasOutput
	hasInput
	hasEncrypted
	hasApprove
)

// contentOf is the field that holds an input item's content of its own,
// by the item's type; 0 for a type whose items the vendor completes from
// its store by id (a built-in tool's call, an item_reference) and for a
// type the gateway does not know.
func contentOf(typ jsonscan.Value) int {
	switch {
	case typ.Equal("message"):
		return hasContent
	case typ.Equal("function_call"):
		return hasArguments
	case typ.Equal("custom_tool_call"):
		return hasInput
	case typ.Equal("function_call_output"), typ.Equal("custom_tool_call_output"), typ.Equal("computer_call_output"),
		typ.Equal("local_shell_call_output"), typ.Equal("shell_call_output"), typ.Equal("apply_patch_call_output"):
		return hasOutput
	case typ.Equal("reasoning"), typ.Equal("compaction"):
		// The reasoning itself is encrypted_content; without it the
		// vendor restores it from the stored item.
		return hasEncrypted
	case typ.Equal("mcp_approval_response"):
		return hasApprove
	}
	return 0
}

// isReference reports whether an input item carrying an id names a stored
// item rather than bringing its own: an item_reference, an item without a
// type (or with a null one), which the vendor reads as a reference, and a
// typed item without its content (contentOf) or of a type without one.
func isReference(typ jsonscan.Value, have int) bool {
	if typ.Kind != jsonscan.String || typ.Equal("item_reference") {
		return true
	}
	need := contentOf(typ)
	return need == 0 || have&need == 0
}

// refReader collects the stored objects a request names while
// parseRequest scans it.
type refReader struct {
	refs    []format.Ref
	unbound *format.Error // the first object named that no account can own

	// The input item being read, and the items and tools before it.
	item, tool      int
	typ, id         jsonscan.Value
	approval        jsonscan.Value
	have            int // its content fields (has...)
	parts, outParts int // its content parts and output parts read

	conversationID, promptID jsonscan.Value
}

// loc names a field for an error's param: base[i]mid[j]field, without an
// index that is negative.
type loc struct {
	base  string
	i     int
	mid   string
	j     int
	field string
}

func (l loc) String() string {
	s := l.base
	if l.i >= 0 {
		s += "[" + strconv.Itoa(l.i) + "]"
	}
	s += l.mid
	if l.j >= 0 {
		s += "[" + strconv.Itoa(l.j) + "]"
	}
	return s + l.field
}

func top(name string) loc { return loc{base: name, i: -1, j: -1} }

func (r *refReader) input(field string) loc { return loc{"input", r.item, field, -1, ""} }

func (r *refReader) inTool(field string) loc { return loc{"tools", r.tool, field, -1, ""} }

func (r *refReader) visit(path int, v jsonscan.Value, check *format.RequestCheck) {
	switch path {
	case refComparison:
		if v.Kind == jsonscan.Null {
			return
		}
		if v.Kind != jsonscan.String || !ValidID(v.Text()) {
			check.Fail("prompt_cache_options.comparison_response_id", "must be a response id")
			return
		}
		r.add(format.Ref{Kind: format.StoredResponse, ID: v.Text()}, check)
	case refConversationID:
		r.conversationID = v
	case refConversation:
		r.named(conversation, top("conversation"), v, r.conversationID, "conversation.id", check)
	case refPromptID:
		r.promptID = v
	case refPrompt:
		if v.Kind == jsonscan.String {
			check.Fail("prompt", "must be an object")
			return
		}
		r.named(prompt, top("prompt"), v, r.promptID, "prompt.id", check)
	default:
		if !r.visitItem(path, v, check) {
			r.visitTool(path, v, check)
		}
	}
}

// visitItem reads the paths inside an input item; it reports whether path
// was one.
func (r *refReader) visitItem(path int, v jsonscan.Value, check *format.RequestCheck) bool {
	switch path {
	case refItemType:
		r.typ = v
	case refItemID:
		r.id = v
	case refItemContent:
		r.content(v, hasContent)
	case refItemArguments:
		r.content(v, hasArguments)
	case refItemOutput:
		r.content(v, hasOutput)
	case refItemInput:
		r.content(v, hasInput)
	case refItemEncrypted:
		r.content(v, hasEncrypted)
	case refItemApprove:
		r.content(v, hasApprove)
	case refItemApproval:
		r.approval = v
	case refPart:
		r.parts++
	case refPartFile:
		r.never(file, loc{"input", r.item, ".content", r.parts, ".file_id"}, v, check)
	case refOutputPart:
		r.outParts++
	case refOutputPartFile:
		r.never(file, loc{"input", r.item, ".output", r.outParts, ".file_id"}, v, check)
	case refOutputFile:
		r.never(file, r.input(".output.file_id"), v, check)
	case refItemContainer:
		r.never(container, r.input(".environment.container_id"), v, check)
	case refItem:
		r.endItem(v, check)
	default:
		return false
	}
	return true
}

// visitTool reads the paths inside an offered tool.
func (r *refReader) visitTool(path int, v jsonscan.Value, check *format.RequestCheck) {
	switch path {
	case refTool:
		r.tool++
	case refVectorStore:
		r.never(vectorStore, r.inTool(".vector_store_ids"), v, check)
	case refVectorStores, refContainerFiles, refEnvFiles:
		if v.Kind == jsonscan.Array || v.Kind == jsonscan.Null {
			return
		}
		field := ".vector_store_ids"
		switch path {
		case refContainerFiles:
			field = ".container.file_ids"
		case refEnvFiles:
			field = ".environment.file_ids"
		}
		check.Fail(r.inTool(field).String(), "must be an array of ids")
	case refContainer:
		switch v.Kind {
		case jsonscan.String:
			r.never(container, r.inTool(".container"), v, check)
		case jsonscan.Object, jsonscan.Null:
		default:
			check.Fail(r.inTool(".container").String(), `must be a container id or {"type": "auto"}`)
		}
	case refContainerFile:
		r.never(file, r.inTool(".container.file_ids"), v, check)
	case refContainerSkill:
		r.never(skill, r.inTool(".container.skills"), v, check)
	case refEnvContainer:
		r.never(container, r.inTool(".environment.container_id"), v, check)
	case refEnvFile:
		r.never(file, r.inTool(".environment.file_ids"), v, check)
	case refEnvSkill:
		r.never(skill, r.inTool(".environment.skills"), v, check)
	case refMaskFile:
		r.never(file, r.inTool(".input_image_mask.file_id"), v, check)
	}
}

// content records that the input item carries a content field.
func (r *refReader) content(v jsonscan.Value, field int) {
	if v.Kind != jsonscan.Null {
		r.have |= field
	}
}

// endItem reads an input item whose fields have been seen.
func (r *refReader) endItem(v jsonscan.Value, check *format.RequestCheck) {
	defer func() {
		r.item++
		r.typ, r.id, r.approval = jsonscan.Value{}, jsonscan.Value{}, jsonscan.Value{}
		r.have, r.parts, r.outParts = 0, 0, 0
	}()
	if v.Kind != jsonscan.Object {
		return
	}
	switch r.typ.Kind {
	case jsonscan.Invalid, jsonscan.Null, jsonscan.String:
	default:
		check.Fail(r.input(".type").String(), "must be a string")
		return
	}
	switch r.approval.Kind {
	case jsonscan.Invalid, jsonscan.Null:
	case jsonscan.String:
		if id := r.approval.Text(); ValidID(id) {
			r.add(format.Ref{Kind: format.StoredItem, ID: id}, check)
			break
		}
		fallthrough
	default:
		check.Fail(r.input(".approval_request_id").String(), "must be an item id")
		return
	}
	switch r.id.Kind {
	case jsonscan.Invalid, jsonscan.Null:
		return
	case jsonscan.String:
	default:
		check.Fail(r.input(".id").String(), "must be a string")
		return
	}
	if !isReference(r.typ, r.have) {
		return
	}
	id := r.id.Text()
	if !ValidID(id) {
		check.Fail(r.input(".id").String(), "must be an item id")
		return
	}
	r.add(format.Ref{Kind: format.StoredItem, ID: id}, check)
}

// add lists a stored object the request names, once.
func (r *refReader) add(ref format.Ref, check *format.RequestCheck) {
	for _, x := range r.refs {
		if x == ref {
			return
		}
	}
	if len(r.refs) == MaxRefs {
		check.Fail("input", "names more than "+strconv.Itoa(MaxRefs)+" stored items by id; send the items themselves, or continue with previous_response_id")
		return
	}
	r.refs = append(r.refs, ref)
}

// named reads a field naming an object either as a string id or as an
// object with an id (idParam, its value id).
func (r *refReader) named(o object, at loc, v, id jsonscan.Value, idParam string, check *format.RequestCheck) {
	switch v.Kind {
	case jsonscan.Null:
	case jsonscan.String:
		r.never(o, at, v, check)
	case jsonscan.Object:
		if id.Kind != jsonscan.String {
			check.Fail(idParam, "must be "+objects[o].id)
			return
		}
		r.never(o, top(idParam), id, check)
	default:
		check.Fail(at.String(), "must be "+objects[o].id+" or an object with one")
	}
}

// never reads the id of an object no account can own: the request is
// refused, after any error in its shape, with the vendor's 404.
func (r *refReader) never(o object, at loc, v jsonscan.Value, check *format.RequestCheck) {
	switch {
	case v.Kind == jsonscan.Null:
		return
	case v.Kind != jsonscan.String:
		check.Fail(at.String(), "must be "+objects[o].id)
		return
	case r.unbound != nil:
		return
	}
	id := v.Text()
	if !ValidID(id) {
		check.Fail(at.String(), "must be "+objects[o].id)
		return
	}
	r.unbound = format.NotStored(at.String(), objects[o].noun, id, objects[o].instead)
}
