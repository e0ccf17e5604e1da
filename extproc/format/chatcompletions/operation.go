package chatcompletions

import "github.com/modelgateway/gateway/extproc/operation"

// Operation is the chat completions API (OpenAI's Chat Completions API).
var Operation = operation.Operation{
	Name: "chat_completions", API: "chat_completions", Format: Format{}, Modes: []string{"chat"},
	Paths:     []operation.Path{{Method: "POST", Path: "/v1/chat/completions"}},
	GenAI:     operation.GenAI{Operation: "chat", Provider: "openai"},
	FreeQuery: map[string][]string{},
}
