package account

// Background responses run at the vendor after their create request has
// been answered, so they cannot be settled when the request ends: the
// request is parked, its hold kept, until a final state of the response
// is seen (internal/store/background.go).

// Parked is a background response waiting for its final state.
type Parked struct {
	ResponseID string `json:"response_id"`
	Upstream   string `json:"upstream"`
	// Settlement is the request's settlement as far as it is known when
	// the response is parked; the final state supplies usage and prices.
	Settlement Settlement `json:"settlement"`
	// MaxInput and MaxOutput bound the usage the final state may be
	// charged for (what the request allowed); 0 when not recorded.
	MaxInput  int64 `json:"max_input,omitempty"`
	MaxOutput int64 `json:"max_output,omitempty"`
}

// BackgroundRef names a parked response.
type BackgroundRef struct {
	AccountID, ResponseID string
}
