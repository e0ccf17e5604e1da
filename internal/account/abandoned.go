package account

import "time"

// AbandonedAttempt is an attempt the gateway gave up on and retried or
// failed (Envoy's upstream log): the vendor may have generated, and
// billed, a reply no client saw. It is an operator-side ledger entry: it
// charges no customer and names none.
type AbandonedAttempt struct {
	At time.Time // the attempt's start
	// Upstream and VendorKey name the upstream and the key tried ("default"
	// for credential_env); Endpoint is "primary" or "reserve", "" when
	// unknown.
	Upstream, VendorKey, Endpoint string
	// Model is the request's priced model; "" when the sidecar no longer
	// knew the request.
	Model string
	// Reason is why it was abandoned (first_byte_timeout, reset,
	// connect_failure, client_left, status_429, status_5xx), Status the
	// vendor's status when it answered (0 when it did not).
	Reason string
	Status int
	// RequestID is Envoy's id of the request (x-request-id).
	RequestID string
}
