package spool

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"strconv"
	"time"

	"github.com/modelgateway/gateway/internal/store"
	"github.com/modelgateway/gateway/internal/usage"
)

// formatVersion is written in every record, so that a later format can
// still read the records of an older sidecar. Version 1 had four token
// fields; version 2 keeps usage by kind name.
const formatVersion = 2

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// record is one spooled settlement as written to the file. It has its own
// field names so that the file format does not follow changes to
// store.Settlement by accident; usage and rates are keyed by the usage kind
// names, which are part of the ledger's format already.
type record struct {
	V           int              `json:"v"`
	RequestID   string           `json:"request_id"`
	AccountID   string           `json:"account_id"`
	KeyID       string           `json:"key_id"`
	Model       string           `json:"model"` // priced
	Requested   string           `json:"model_requested,omitempty"`
	Reported    string           `json:"model_reported,omitempty"`
	Usage       map[string]int64 `json:"usage,omitempty"`
	Rates       map[string]int64 `json:"rates,omitempty"`
	ServiceTier string           `json:"service_tier,omitempty"`
	LongContext int64            `json:"long_context,omitempty"`
	Fallback    bool             `json:"fallback,omitempty"`
	// Version 1's token fields.
	Input      int64     `json:"input,omitempty"`
	Output     int64     `json:"output,omitempty"`
	CacheWrite int64     `json:"cache_write,omitempty"`
	CacheRead  int64     `json:"cache_read,omitempty"`
	Cost       int64     `json:"cost"`
	Estimated  bool      `json:"estimated"`
	Status     int       `json:"status"`
	Endpoint   string    `json:"endpoint"`
	Stream     bool      `json:"stream"`
	StartedAt  time.Time `json:"started_at"`
	EndedAt    time.Time `json:"ended_at"`
	SpooledAt  time.Time `json:"spooled_at"`
}

// encode returns the settlement as one line of the spool file:
//
//	CRC SP JSON LF
//
// where CRC is the CRC-32C of JSON in 8 lowercase hex digits. The checksum
// tells a record that was cut short or damaged on disk from a good one; the
// line stays readable with ordinary tools.
func encode(st store.Settlement, now time.Time) ([]byte, error) {
	js, err := json.Marshal(record{
		V: formatVersion, RequestID: st.RequestID, AccountID: st.AccountID, KeyID: st.KeyID,
		Model: string(st.Priced), Requested: string(st.Requested), Reported: string(st.Reported),
		Usage: usage.ByName(st.Usage), Rates: usage.ByName(st.Rates), ServiceTier: st.ServiceTier,
		LongContext: st.LongContext, Fallback: st.Fallback, Cost: st.Cost, Estimated: st.Estimated, Status: st.Status,
		Endpoint: st.Endpoint, Stream: st.Stream, StartedAt: st.StartedAt, EndedAt: st.EndedAt,
		SpooledAt: now.UTC(),
	})
	if err != nil {
		return nil, fmt.Errorf("spool: encode %s: %w", st.RequestID, err)
	}
	line := make([]byte, 0, len(js)+10)
	line = fmt.Appendf(line, "%08x ", crc32.Checksum(js, castagnoli))
	line = append(line, js...)
	return append(line, '\n'), nil
}

// decode reads one line, without its LF.
func decode(line []byte) (store.Settlement, error) {
	if len(line) < 10 || line[8] != ' ' {
		return store.Settlement{}, errors.New("not a spool record")
	}
	sum, err := strconv.ParseUint(string(line[:8]), 16, 32)
	if err != nil {
		return store.Settlement{}, errors.New("bad checksum field")
	}
	js := line[9:]
	if crc32.Checksum(js, castagnoli) != uint32(sum) {
		return store.Settlement{}, errors.New("checksum mismatch")
	}
	var r record
	if err := json.Unmarshal(js, &r); err != nil {
		return store.Settlement{}, fmt.Errorf("bad record: %w", err)
	}
	st := store.Settlement{
		RequestID: r.RequestID, AccountID: r.AccountID, KeyID: r.KeyID,
		Priced: usage.PricedModel(r.Model), Requested: usage.RequestedModel(r.Requested), Reported: usage.ReportedModel(r.Reported),
		ServiceTier: r.ServiceTier, LongContext: r.LongContext, Fallback: r.Fallback,
		Cost: r.Cost, Estimated: r.Estimated, Status: r.Status, Endpoint: r.Endpoint, Stream: r.Stream,
		StartedAt: r.StartedAt, EndedAt: r.EndedAt,
	}
	switch r.V {
	case 1:
		st.Requested = usage.RequestedModel(r.Model)
		st.Usage = usage.Usage{Input: r.Input, Output: r.Output, CacheWrite5m: r.CacheWrite, CacheRead: r.CacheRead}
	case formatVersion:
		if st.Usage, err = usage.FromNames(r.Usage); err != nil {
			return store.Settlement{}, fmt.Errorf("bad record: %w", err)
		}
		if st.Rates, err = usage.FromNames(r.Rates); err != nil {
			return store.Settlement{}, fmt.Errorf("bad record: %w", err)
		}
	default:
		return store.Settlement{}, fmt.Errorf("unknown record version %d", r.V)
	}
	return st, nil
}
