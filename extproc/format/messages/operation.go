package messages

import "github.com/modelgateway/gateway/extproc/operation"

// Operation is the messages API (Anthropic's Messages API).
var Operation = operation.Operation{
	Name: "messages", API: "messages", Format: Format{}, Modes: []string{"chat"},
	Paths: []operation.Path{{Method: "POST", Path: "/v1/messages", Query: []string{"beta"}}},
	GenAI: operation.GenAI{Operation: "chat", Provider: "anthropic"},
	// The SDK's beta namespace sends "beta"; the model list pages.
	FreeQuery: map[string][]string{
		"/v1/messages/count_tokens": {"beta"},
		"/v1/models":                {"beta", "limit", "after_id", "before_id"},
		"/v1/models/*":              {"beta"},
	},
}
