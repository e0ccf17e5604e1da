package extproc

// Envoy's upstream log of the attempts it abandoned: a first-byte timeout
// or a reset before any reply, or a 429 or 5xx, each retried or failed.
// The vendor may have generated (and billed) a reply to an attempt no
// client saw; each becomes an operator-side ledger entry
// (account.AbandonedAttempt), charged to no customer, which the
// reconciliation with the vendors' reports explains their usage with.

import (
	accesslogdatav3 "github.com/envoyproxy/go-control-plane/envoy/data/accesslog/v3"

	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/config"
)

// AbandonedLogName is the log_name of Envoy's upstream log of abandoned
// attempts; EndpointLogTag its custom tag of the serving host's endpoint.
const (
	AbandonedLogName = "abandoned_attempts"
	EndpointLogTag   = "endpoint"
)

// abandoned reads one entry of the abandoned attempts' log.
func (l *KeyLog) abandoned(e *accesslogdatav3.HTTPAccessLogEntry) {
	if l.s.onAbandoned == nil {
		return
	}
	c := e.GetCommonProperties()
	status := int(e.GetResponse().GetResponseCode().GetValue())
	if status >= 200 && status < 300 {
		return
	}
	a := account.AbandonedAttempt{
		Upstream:  c.GetRouteName(),
		VendorKey: c.GetCustomTags()[KeyLogTag],
		Endpoint:  c.GetCustomTags()[EndpointLogTag],
		Status:    status,
		Reason:    abandonReason(c.GetResponseFlags(), status),
		RequestID: e.GetRequest().GetRequestId(),
	}
	if a.Upstream == "" {
		return // not a metered route
	}
	if a.VendorKey == "" {
		// One key (credential_env), whose cluster has no key metadata.
		a.VendorKey = config.DefaultKeyName
	}
	if ts := c.GetStartTime(); ts != nil {
		a.At = ts.AsTime().UTC()
	} else {
		a.At = l.now().UTC()
	}
	a.Model = l.s.attemptModels.get(a.RequestID)
	l.s.metrics.abandonedAttempts.WithLabelValues(a.Upstream, a.VendorKey, a.Reason).Inc()
	l.s.onAbandoned(a)
}

// abandonReason names why Envoy gave up on an attempt, from its response
// flags and the vendor's status.
func abandonReason(f *accesslogdatav3.ResponseFlags, status int) string {
	switch {
	case f.GetUpstreamRequestTimeout():
		return "first_byte_timeout"
	case f.GetDownstreamConnectionTermination():
		return "client_left"
	case f.GetUpstreamConnectionFailure():
		return "connect_failure"
	case f.GetUpstreamRemoteReset(), f.GetUpstreamConnectionTermination(), f.GetLocalReset():
		return "reset"
	case status == 429:
		return "status_429"
	case status >= 500:
		return "status_5xx"
	}
	return "other"
}
