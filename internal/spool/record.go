package spool

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"strconv"
	"time"

	"github.com/modelgateway/gateway/internal/store"
)

// formatVersion is written in every record, so that a later format can
// still read the records of an older sidecar.
const formatVersion = 1

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// record is one spooled settlement as written to the file. It has its own
// field names so that the file format does not follow changes to
// store.Settlement by accident.
type record struct {
	V          int       `json:"v"`
	RequestID  string    `json:"request_id"`
	AccountID  string    `json:"account_id"`
	KeyID      string    `json:"key_id"`
	Model      string    `json:"model"`
	Input      int64     `json:"input"`
	Output     int64     `json:"output"`
	CacheWrite int64     `json:"cache_write"`
	CacheRead  int64     `json:"cache_read"`
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
		Model: st.Model, Input: st.Input, Output: st.Output, CacheWrite: st.CacheWrite,
		CacheRead: st.CacheRead, Cost: st.Cost, Estimated: st.Estimated, Status: st.Status,
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
	if r.V != formatVersion {
		return store.Settlement{}, fmt.Errorf("unknown record version %d", r.V)
	}
	return store.Settlement{
		RequestID: r.RequestID, AccountID: r.AccountID, KeyID: r.KeyID, Model: r.Model,
		Input: r.Input, Output: r.Output, CacheWrite: r.CacheWrite, CacheRead: r.CacheRead,
		Cost: r.Cost, Estimated: r.Estimated, Status: r.Status, Endpoint: r.Endpoint, Stream: r.Stream,
		StartedAt: r.StartedAt, EndedAt: r.EndedAt,
	}, nil
}
