package spool

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"strconv"
	"time"

	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/store"
	"github.com/modelgateway/gateway/internal/usage"
)

// formatVersion is written in every record, so that a later format can
// still read the records of an older sidecar. Version 1 had four token
// fields; version 2 keeps usage by kind name; version 3 keeps the ledger
// entry itself.
const formatVersion = 3

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// record is one spooled settlement as written to the file: its ledger entry
// exactly as the store writes it to Redis (store.LedgerFields), so that the
// spool carries every field the ledger keeps without a list of its own, and
// the account whose ledger it goes to.
type record struct {
	V         int               `json:"v"`
	AccountID string            `json:"account_id"`
	Entry     map[string]string `json:"entry"`
	SpooledAt time.Time         `json:"spooled_at"`
}

// recordV2 is a record of versions 1 and 2, which kept their own copy of
// the settlement's fields (and lost those added to it later). It is read
// only, so that the files of older sidecars replay.
type recordV2 struct {
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
func encode(st account.Settlement, now time.Time) ([]byte, error) {
	js, err := json.Marshal(record{
		V: formatVersion, AccountID: st.AccountID, Entry: store.LedgerFields(st), SpooledAt: now.UTC(),
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
func decode(line []byte) (account.Settlement, error) {
	if len(line) < 10 || line[8] != ' ' {
		return account.Settlement{}, errors.New("not a spool record")
	}
	sum, err := strconv.ParseUint(string(line[:8]), 16, 32)
	if err != nil {
		return account.Settlement{}, errors.New("bad checksum field")
	}
	js := line[9:]
	if crc32.Checksum(js, castagnoli) != uint32(sum) {
		return account.Settlement{}, errors.New("checksum mismatch")
	}
	var r record
	if err := json.Unmarshal(js, &r); err != nil {
		return account.Settlement{}, fmt.Errorf("bad record: %w", err)
	}
	switch r.V {
	case 1, 2:
		return decodeV2(js)
	case formatVersion:
	default:
		return account.Settlement{}, fmt.Errorf("unknown record version %d", r.V)
	}
	st := store.SettlementFromLedger(r.AccountID, r.Entry)
	if st.RequestID == "" {
		return account.Settlement{}, errors.New("bad record: no request id")
	}
	return st, nil
}

// decodeV2 reads the JSON of a version 1 or 2 record.
func decodeV2(js []byte) (account.Settlement, error) {
	var r recordV2
	if err := json.Unmarshal(js, &r); err != nil {
		return account.Settlement{}, fmt.Errorf("bad record: %w", err)
	}
	st := account.Settlement{
		RequestID: r.RequestID, AccountID: r.AccountID, KeyID: r.KeyID,
		Priced: usage.PricedModel(r.Model), Requested: usage.RequestedModel(r.Requested), Reported: usage.ReportedModel(r.Reported),
		ServiceTier: r.ServiceTier, LongContext: r.LongContext, Fallback: r.Fallback,
		Cost: r.Cost, Estimated: r.Estimated, Status: r.Status, Endpoint: r.Endpoint, Stream: r.Stream,
		StartedAt: r.StartedAt, EndedAt: r.EndedAt,
	}
	var err error
	switch r.V {
	case 1:
		st.Requested = usage.RequestedModel(r.Model)
		st.Usage = usage.Usage{Input: r.Input, Output: r.Output, CacheWrite5m: r.CacheWrite, CacheRead: r.CacheRead}
	case 2:
		if st.Usage, err = usage.FromNames(r.Usage); err != nil {
			return account.Settlement{}, fmt.Errorf("bad record: %w", err)
		}
		if st.Rates, err = usage.FromNames(r.Rates); err != nil {
			return account.Settlement{}, fmt.Errorf("bad record: %w", err)
		}
	}
	return st, nil
}
