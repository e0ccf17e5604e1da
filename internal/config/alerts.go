package config

// Alerts configure the webhook events (docs/limits.md).
type Alerts struct {
	// Interval is how often each sidecar looks at every account's balance,
	// budgets and keys for a crossing.
	Interval Duration `yaml:"interval"`
	// StoreUnreachableAfter is how long the store must fail before
	// store.unreachable fires; 0 never fires it.
	StoreUnreachableAfter Duration `yaml:"store_unreachable_after"`
	// QueueSize bounds the deliveries waiting (retries included); more are
	// dropped and counted.
	QueueSize int       `yaml:"queue_size"`
	Webhooks  []Webhook `yaml:"webhooks"`
}

// Webhook is one receiver of alert events.
type Webhook struct {
	URL string `yaml:"url"`
	// SecretEnv names the environment variable holding the signing secret.
	SecretEnv string `yaml:"secret_env"`
	// Events are the event types sent; empty sends every type.
	Events []string `yaml:"events"`
}

// AlertEvents are the webhook event types.
var AlertEvents = []string{"balance.low", "budget.threshold", "key.expiring", "account.suspended", "account.resumed", "store.unreachable", "vendor_key.refused", "model.mismatch", "reconcile.drift"}
