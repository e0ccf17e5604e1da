package chatcompletions

import (
	"github.com/modelgateway/gateway/extproc/format"
	"github.com/modelgateway/gateway/extproc/jsonscan"
)

var _ format.ModelLister = Format{}

// ModelList writes {"object":"list","data":[model...]}: the vendor does
// not page its list.
func (Format) ModelList(ids []string, query map[string][]string) []byte {
	b := []byte(`{"object":"list","data":[`)
	for i, id := range ids {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendModel(b, id)
	}
	return append(b, "]}"...)
}

// Model writes {"id":ID,"object":"model","created":0,"owned_by":"openai"}.
// The gateway does not know when the vendor created a model: 0.
func (Format) Model(id string) []byte { return appendModel(nil, id) }

func appendModel(b []byte, id string) []byte {
	b = append(b, `{"id":`...)
	b = jsonscan.AppendQuote(b, id)
	return append(b, `,"object":"model","created":0,"owned_by":"openai"}`...)
}
