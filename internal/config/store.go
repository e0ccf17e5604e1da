package config

// Store says where state lives.
type Store struct {
	// RedisURL is a redis:// or rediss:// URL; the REDIS_URL environment
	// variable overrides it. gateway serve requires one; gateway-local starts
	// an in-memory store when it is empty.
	RedisURL string `yaml:"redis_url"`
	// SpoolDir holds settlements that could not reach Redis until replayed.
	SpoolDir string `yaml:"spool_dir"`
	// LedgerRetention is how long a ledger entry is kept once exported
	// (gatewayctl ledger export); 0 keeps every entry. An entry that was
	// never exported is never trimmed, nor one the ledger sink has not
	// copied once the sink has started.
	LedgerRetention Duration `yaml:"ledger_retention"`
	// AuditRetention is how long an audit entry is kept in the store; 0
	// keeps the newest 100,000. The ledger sink copies every entry into
	// PostgreSQL's audit table, which keeps them as the operator decides.
	AuditRetention Duration `yaml:"audit_retention"`
	// Timeout bounds each store call (dial, read, write, waiting for a
	// connection): a store that does not answer within it fails the request
	// with 503 and retry-after. Default 500ms.
	Timeout Duration `yaml:"timeout"`
}
