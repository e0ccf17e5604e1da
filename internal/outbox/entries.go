package outbox

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/usage"
)

// The kinds of entry, its first byte. The rest is the value's fields in
// order, each a varint (numbers, flags, times as unix nanoseconds, 0 for
// the zero time) or a length-prefixed string, usage by kind
// (usage.Kinds): an entry lives only until the next run reads it, and is
// written for every request, so it is not JSON. TestEntriesCarryEveryField
// fills every field of both types: a field added to one fails it until
// the entry carries it.
const (
	// KindRecord is the hold record of a request admitted from a lease
	// (account.LeasedRequest), kept until Redis holds the request or its
	// settlement's entry takes its place.
	KindRecord = 'r'
	// KindSettlement is a settlement queued for the store
	// (account.Settlement), kept until the store or the spool has it.
	KindSettlement = 's'
)

// KeepRecord keeps r's hold record (KindRecord).
// KeepRecord and KeepSettlement take their values by copy: a pointer
// passed through the interfaces their users call them by would move each
// request's record to the heap.
func (o *Outbox) KeepRecord(r account.LeasedRequest) (slot int32, ok bool) {
	e := newEncoder(KindRecord)
	e.lease(r.Lease)
	e.bool(r.KeyCounted)
	e.bool(r.ProjectCounted)
	e.int(r.Slot)
	e.int(int64(r.Rates))
	e.time(r.At)
	a := &r.Admission
	e.str(a.RequestID)
	e.str(a.AccountID)
	e.str(a.KeyID)
	e.str(string(a.Priced))
	e.str(string(a.Requested))
	e.int(a.Hold)
	e.int(a.Tokens)
	e.bool(a.Stream)
	e.str(a.Transport)
	e.time(a.StartedAt)
	e.limits(a.KeyLimits)
	e.str(a.ProjectID)
	e.limits(a.ProjectLimits)
	return o.keep(e)
}

// KeepSettlement keeps st (KindSettlement).
func (o *Outbox) KeepSettlement(st account.Settlement) (slot int32, ok bool) {
	e := newEncoder(KindSettlement)
	e.str(st.RequestID)
	e.str(st.AccountID)
	e.str(st.KeyID)
	e.str(st.ProjectID)
	e.str(string(st.Requested))
	e.str(string(st.Priced))
	e.str(string(st.Reported))
	e.usage(st.Usage)
	e.usage(st.Rates)
	e.str(st.ServiceTier)
	e.bool(st.TierUnknown)
	e.str(st.Region)
	e.int(st.Uplift)
	e.int(st.LongContext)
	e.bool(st.Fallback)
	e.int(st.Cost)
	e.bool(st.Estimated)
	e.bool(st.Capped)
	e.bool(st.Interrupted)
	e.bool(st.Reconciled)
	e.lease(st.Lease)
	e.int(int64(st.Status))
	e.str(st.Endpoint)
	e.str(st.VendorKey)
	e.bool(st.Stream)
	e.str(st.Transport)
	e.time(st.StartedAt)
	e.time(st.EndedAt)
	return o.keep(e)
}

// Decode reads an entry a previous process left: a record (kind
// KindRecord) or a settlement (KindSettlement).
func Decode(e Entry) (kind byte, r account.LeasedRequest, st account.Settlement, err error) {
	if len(e.Data) == 0 {
		return 0, r, st, fmt.Errorf("outbox: entry in slot %d: empty", e.Slot)
	}
	d := &decoder{b: e.Data[1:]}
	kind = e.Data[0]
	switch kind {
	case KindRecord:
		r.Lease = d.lease()
		r.KeyCounted = d.bool()
		r.ProjectCounted = d.bool()
		r.Slot = d.int()
		r.Rates = int(d.int())
		r.At = d.time()
		a := &r.Admission
		a.RequestID = d.str()
		a.AccountID = d.str()
		a.KeyID = d.str()
		a.Priced = usage.PricedModel(d.str())
		a.Requested = usage.RequestedModel(d.str())
		a.Hold = d.int()
		a.Tokens = d.int()
		a.Stream = d.bool()
		a.Transport = d.str()
		a.StartedAt = d.time()
		a.KeyLimits = d.limits()
		a.ProjectID = d.str()
		a.ProjectLimits = d.limits()
		if d.err == nil && (a.RequestID == "" || a.AccountID == "" || r.Lease.ID == "") {
			d.err = errors.New("a record without its request, account or lease")
		}
	case KindSettlement:
		st.RequestID = d.str()
		st.AccountID = d.str()
		st.KeyID = d.str()
		st.ProjectID = d.str()
		st.Requested = usage.RequestedModel(d.str())
		st.Priced = usage.PricedModel(d.str())
		st.Reported = usage.ReportedModel(d.str())
		st.Usage = d.usage()
		st.Rates = d.usage()
		st.ServiceTier = d.str()
		st.TierUnknown = d.bool()
		st.Region = d.str()
		st.Uplift = d.int()
		st.LongContext = d.int()
		st.Fallback = d.bool()
		st.Cost = d.int()
		st.Estimated = d.bool()
		st.Capped = d.bool()
		st.Interrupted = d.bool()
		st.Reconciled = d.bool()
		st.Lease = d.lease()
		st.Status = int(d.int())
		st.Endpoint = d.str()
		st.VendorKey = d.str()
		st.Stream = d.bool()
		st.Transport = d.str()
		st.StartedAt = d.time()
		st.EndedAt = d.time()
		if d.err == nil && (st.RequestID == "" || st.AccountID == "") {
			d.err = errors.New("a settlement without its request or account")
		}
	default:
		d.err = fmt.Errorf("unknown kind %q", kind)
	}
	if d.err == nil && len(d.b) != 0 {
		d.err = fmt.Errorf("%d bytes after the last field", len(d.b))
	}
	if d.err != nil {
		return 0, account.LeasedRequest{}, account.Settlement{}, fmt.Errorf("outbox: entry in slot %d: %w", e.Slot, d.err)
	}
	return kind, r, st, nil
}

// encoder appends fields to b; its buffers are pooled, so that keeping an
// entry allocates nothing (Keep copies b into the slot).
type encoder struct{ b []byte }

var bufs = sync.Pool{New: func() any { return &encoder{b: make([]byte, 0, SlotSize)} }}

// newEncoder is a pooled encoder holding an entry of kind, for keep.
func newEncoder(kind byte) *encoder {
	e := bufs.Get().(*encoder)
	e.b = append(e.b[:0], kind)
	return e
}

// keep keeps e's entry and gives e back to the pool.
func (o *Outbox) keep(e *encoder) (int32, bool) {
	slot, ok := o.Keep(e.b)
	bufs.Put(e)
	return slot, ok
}

func (e *encoder) int(v int64) { e.b = binary.AppendVarint(e.b, v) }

func (e *encoder) bool(v bool) {
	if v {
		e.b = append(e.b, 1)
	} else {
		e.b = append(e.b, 0)
	}
}

func (e *encoder) str(s string) {
	e.b = binary.AppendUvarint(e.b, uint64(len(s)))
	e.b = append(e.b, s...)
}

func (e *encoder) time(t time.Time) {
	if t.IsZero() {
		e.b = append(e.b, 0)
		return
	}
	e.b = append(e.b, 1)
	e.int(t.UnixNano())
}

func (e *encoder) usage(u usage.Usage) {
	for _, k := range usage.Kinds {
		e.int(k.Of(u))
	}
}

func (e *encoder) lease(l account.LeaseRef) {
	e.str(l.ID)
	e.int(l.Seq)
	e.int(l.Hold)
	e.int(l.Tokens)
	e.int(l.Bucket)
	e.int(int64(l.TokenLevels))
}

func (e *encoder) limits(l account.Limits) {
	e.int(l.DailyNanoUSD)
	e.int(l.RPM)
	e.int(l.WindowMinutes)
	e.int(l.TPM)
	e.int(l.Concurrency)
	e.int(l.MonthlyNanoUSD)
	e.int(l.TotalNanoUSD)
	e.int(l.ConcurrencyWaitSeconds)
}

// decoder reads what encoder wrote; the first error sticks, and every read
// after it returns zero.
type decoder struct {
	b   []byte
	err error
}

var errShort = errors.New("cut short")

func (d *decoder) int() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.err = errShort
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) bool() bool {
	if d.err != nil {
		return false
	}
	if len(d.b) == 0 || d.b[0] > 1 {
		d.err = errors.New("bad flag")
		return false
	}
	v := d.b[0] == 1
	d.b = d.b[1:]
	return v
}

func (d *decoder) str() string {
	if d.err != nil {
		return ""
	}
	n, k := binary.Uvarint(d.b)
	if k <= 0 || n > uint64(len(d.b)-k) {
		d.err = errShort
		return ""
	}
	s := string(d.b[k : k+int(n)])
	d.b = d.b[k+int(n):]
	return s
}

func (d *decoder) time() time.Time {
	if !d.bool() {
		return time.Time{}
	}
	return time.Unix(0, d.int()).UTC()
}

func (d *decoder) usage() (u usage.Usage) {
	for _, k := range usage.Kinds {
		k.Set(&u, d.int())
	}
	return u
}

func (d *decoder) lease() account.LeaseRef {
	return account.LeaseRef{ID: d.str(), Seq: d.int(), Hold: d.int(), Tokens: d.int(), Bucket: d.int(), TokenLevels: int(d.int())}
}

func (d *decoder) limits() account.Limits {
	return account.Limits{
		DailyNanoUSD: d.int(), RPM: d.int(), WindowMinutes: d.int(), TPM: d.int(), Concurrency: d.int(),
		MonthlyNanoUSD: d.int(), TotalNanoUSD: d.int(), ConcurrencyWaitSeconds: d.int(),
	}
}
