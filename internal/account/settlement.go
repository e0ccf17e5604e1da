package account

import (
	"time"

	"github.com/modelgateway/gateway/internal/usage"
)

// Settlement ends one admitted request. Applying the same RequestID twice has
// no further effect.
type Settlement struct {
	RequestID string
	AccountID string
	KeyID     string
	// ProjectID is the project the request counted against (its key's at
	// admission); "" for the default project.
	ProjectID string
	// The three models of the request: usage is counted under Priced; the
	// ledger keeps all three.
	Requested usage.RequestedModel
	Priced    usage.PricedModel
	Reported  usage.ReportedModel
	Usage     usage.Usage
	// Rates are the unit prices Cost was computed from, in nano-USD per
	// million units of each kind (pricing.Rates), so that an invoice line can
	// be rebuilt from the ledger.
	Rates       usage.Usage
	ServiceTier string // the service tier priced; "" for the standard tier
	// TierUnknown: the reply reported a ServiceTier the model has no prices
	// for; it was priced at the dearest of the model's tiers.
	TierUnknown bool
	// Region is the regional processing region of the endpoint that served
	// the reply, and Uplift the catalogue's uplift applied for it, in parts
	// per million of the cost; "" and 0 when none applied.
	Region      string
	Uplift      int64
	LongContext int64 // the long-context threshold priced, in tokens; 0 for none
	Fallback    bool  // priced with the upstream's price for unknown models
	Cost        int64 // nano-USD; zero for non-2xx replies
	Estimated   bool
	// Capped: the vendor reported more usage than the request allowed
	// (max_tokens × n for output, the model's context window for input);
	// Usage is capped at that.
	Capped bool
	// Interrupted marks a request settled by the sweeper at its last
	// checkpoint because its sidecar stopped renewing its hold.
	Interrupted bool
	// Reconciled marks the ledger entry of a settlement that arrived after
	// its request was swept: its amounts (cost, usage) are the difference
	// from the interrupted entry, of either sign. Set by the store only.
	Reconciled bool
	// Lease is the lease the request was admitted from; zero when admitted
	// by the store's admission script.
	Lease    LeaseRef
	Status   int    // the status the client saw; non-2xx charges nothing and counts no usage
	Endpoint string // "primary" or "reserve"; empty when unknown
	// VendorKey names the vendor key that served (upstreams[].keys, or
	// "default" for credential_env); empty when unknown. Never the secret.
	VendorKey string
	Stream    bool
	// Transport is how the client sent the request: "" for HTTP,
	// "websocket" for the Responses API's WebSocket transport.
	Transport string
	StartedAt time.Time
	EndedAt   time.Time
}

// Checkpoint is the best-known outcome of a running request, written by the
// renewer so that a request interrupted by a crash is settled at it: the
// settlement as if the request ended now, or the part of it known (a reply's
// status and endpoint before its body). The store keeps it in the encoding
// of every other settlement.
type Checkpoint = Settlement

// Checkpoint is what a sweep would charge for the request if it ended as
// st says. It is published by address (holds), so it is a copy.
func (st *Settlement) Checkpoint() *Checkpoint {
	c := *st
	return &c
}
