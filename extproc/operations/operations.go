// Package operations registers the metered operations the gateway knows:
// one line each. An upstream serves those gateway.yaml lists for it.
package operations

import (
	"github.com/modelgateway/gateway/extproc/format/chatcompletions"
	"github.com/modelgateway/gateway/extproc/format/embeddings"
	"github.com/modelgateway/gateway/extproc/format/images"
	"github.com/modelgateway/gateway/extproc/format/messages"
	"github.com/modelgateway/gateway/extproc/format/responses"
	"github.com/modelgateway/gateway/extproc/format/transcriptions"
	"github.com/modelgateway/gateway/extproc/operation"
)

// All are the operations, by name in gateway.yaml.
var All = operation.Registry{
	&messages.Operation,
	&chatcompletions.Operation,
	&responses.Operation,
	&embeddings.Operation,
	&transcriptions.Operation,
	&images.Operation,
}
