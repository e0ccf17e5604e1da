package config

import (
	"fmt"
	"time"
)

// Reconcile configures the continuous reconciliation with the vendors'
// usage reports, which runs on one sidecar at a time for the upstreams
// with an admin key (upstreams[].admin_credential_env).
type Reconcile struct {
	// BucketWidth is the window reconciled at a time: "1h", or "1m".
	BucketWidth string `yaml:"bucket_width"`
	// ReportingDelay is how long after a window's end it is reconciled:
	// the vendors' reports lag the requests they count.
	ReportingDelay Duration `yaml:"reporting_delay"`
	// Interval is how often a sidecar looks for windows due.
	Interval Duration `yaml:"interval"`
	// Lookback is how far back the first run starts.
	Lookback Duration `yaml:"lookback"`
	// DriftUSD and DriftTokens are the thresholds of the reconcile.drift
	// alert: a vendor key's unexplained difference in a window above
	// either (in absolute value) alerts once; 0 turns that one off.
	DriftUSD    float64 `yaml:"drift_usd"`
	DriftTokens int64   `yaml:"drift_tokens"`
}

func (r *Reconcile) setDefaults() {
	def(&r.BucketWidth, "1h")
	defDur(&r.ReportingDelay, 30*time.Minute)
	defDur(&r.Interval, 5*time.Minute)
	defDur(&r.Lookback, 24*time.Hour)
	def(&r.DriftUSD, 0.10)
}

func (r Reconcile) validate() error {
	if r.BucketWidth != "1h" && r.BucketWidth != "1m" {
		return fmt.Errorf("reconcile.bucket_width: %q, want 1h or 1m", r.BucketWidth)
	}
	for field, d := range map[string]Duration{"reporting_delay": r.ReportingDelay, "interval": r.Interval, "lookback": r.Lookback} {
		if d.D() <= 0 {
			return fmt.Errorf("reconcile.%s: must be positive", field)
		}
	}
	if r.DriftUSD < 0 || r.DriftTokens < 0 {
		return fmt.Errorf("reconcile: drift_usd and drift_tokens must not be negative")
	}
	return nil
}
