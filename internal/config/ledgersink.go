package config

// LedgerSink configures `gateway ledger-sink`. The database URL is not
// here: it carries a password and comes from the command line or the
// environment.
type LedgerSink struct {
	// Listen serves the sink's /metrics and /health. Default 127.0.0.1:9465.
	Listen string `yaml:"listen"`
	// Interval is the pause between passes once every entry is copied, and
	// between attempts to reach the database. Default 1s.
	Interval Duration `yaml:"interval"`
}
