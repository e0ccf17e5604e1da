package messages

import (
	"slices"
	"strconv"

	"github.com/modelgateway/gateway/extproc/format"
	"github.com/modelgateway/gateway/extproc/jsonscan"
)

var _ format.ModelLister = Format{}

// Page sizes of the vendor's model list.
const (
	defaultModelPage = 20
	maxModelPage     = 1000
)

// ModelList writes one page of the vendor's paged list:
// {"data":[model...],"has_more":B,"first_id":ID,"last_id":ID}, limit models
// (default 20, at most 1000) after after_id or before before_id.
func (Format) ModelList(ids []string, query map[string][]string) []byte {
	limit := defaultModelPage
	if v := first(query["limit"]); v != "" {
		if n, err := strconv.Atoi(v); err == nil && n >= 1 {
			limit = min(n, maxModelPage)
		}
	}
	lo, hi := 0, len(ids)
	if a := first(query["after_id"]); a != "" {
		if i := slices.Index(ids, a); i >= 0 {
			lo = i + 1
		}
	}
	if bID := first(query["before_id"]); bID != "" {
		if i := slices.Index(ids, bID); i >= 0 {
			hi = i
			lo = max(lo, hi-limit)
		}
	}
	page := ids[lo:min(hi, lo+limit)]
	b := []byte(`{"data":[`)
	for i, id := range page {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendModel(b, id)
	}
	b = append(b, `],"has_more":`...)
	more := lo+len(page) < hi
	if first(query["before_id"]) != "" {
		more = lo > 0 // paging backwards: more before this page
	}
	b = strconv.AppendBool(b, more)
	b = append(b, `,"first_id":`...)
	b = appendIDOrNull(b, page, 0)
	b = append(b, `,"last_id":`...)
	b = appendIDOrNull(b, page, len(page)-1)
	return append(b, '}')
}

// Model writes {"type":"model","id":ID,"display_name":ID,"created_at":...,
// "lifecycle":"active"} (every model the gateway serves is in use).
// The gateway does not know the vendor's display name or release date: the
// id, and the Unix epoch.
func (Format) Model(id string) []byte { return appendModel(nil, id) }

func appendModel(b []byte, id string) []byte {
	b = append(b, `{"type":"model","id":`...)
	b = jsonscan.AppendQuote(b, id)
	b = append(b, `,"display_name":`...)
	b = jsonscan.AppendQuote(b, id)
	return append(b, `,"created_at":"1970-01-01T00:00:00Z","lifecycle":"active"}`...)
}

func appendIDOrNull(b []byte, ids []string, i int) []byte {
	if i < 0 || i >= len(ids) {
		return append(b, "null"...)
	}
	return jsonscan.AppendQuote(b, ids[i])
}

func first(v []string) string {
	if len(v) == 0 {
		return ""
	}
	return v[0]
}
