package format

// A ModelLister writes the vendor's own answers to GET /v1/models and
// GET /v1/models/{id}, which the gateway gives itself: the models it
// serves and prices on the upstream, never the vendor's whole list, so that
// a client's model picker offers nothing the gateway would refuse.
type ModelLister interface {
	// ModelList is the list of ids (sorted), as one page: query is the
	// request's query parameters (limit, after_id, before_id where the
	// vendor pages its list).
	ModelList(ids []string, query map[string][]string) []byte
	// Model is one model's object.
	Model(id string) []byte
}
