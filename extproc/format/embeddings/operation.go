package embeddings

import "github.com/modelgateway/gateway/extproc/operation"

// Operation is the embeddings API (OpenAI's Embeddings API).
var Operation = operation.Operation{
	Name: "embeddings", API: "chat_completions", Format: Format{}, Modes: []string{"embedding"},
	Paths: []operation.Path{{Method: "POST", Path: "/v1/embeddings"}},
	GenAI: operation.GenAI{Operation: "embeddings", Provider: "openai"},
}
