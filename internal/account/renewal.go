package account

// Renewal extends one running request's hold (internal/holds renews the
// holds of a sidecar's open requests).
type Renewal struct {
	AccountID  string
	RequestID  string
	Checkpoint *Checkpoint // nil keeps the last checkpoint
}
