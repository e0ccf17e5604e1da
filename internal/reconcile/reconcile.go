// Package reconcile sets the vendors' usage reports against the ledger:
// per vendor key, model and bucket, the tokens the vendor counted, the
// tokens the ledger counted, and their difference split into what the
// ledger explains and what it does not.
package reconcile

import (
	"cmp"
	"slices"
	"time"

	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/usage"
	"github.com/modelgateway/gateway/internal/vendorusage"
)

// ClientDisconnect is the class of a difference in a bucket with ledger
// entries settled at an estimate: their clients left before the vendor's
// usage arrived, and the vendor counts what it generated.
const ClientDisconnect = "client_disconnect"

// AbandonedAttempts is the class of a difference in a bucket with attempts
// the gateway abandoned (account.AbandonedAttempt): the vendor may have
// generated a reply no client saw, and bills it. A bucket with both
// abandoned attempts and estimated entries puts its difference to
// BothClasses, which cannot be split.
const (
	AbandonedAttempts = "abandoned_attempts"
	BothClasses       = AbandonedAttempts + "+" + ClientDisconnect
)

// Reserve is the endpoint whose usage the vendor's report does not hold:
// the report is the primary's (the admin key is the primary endpoint's).
const Reserve = "reserve"

// Pricer is the cost, in nano-USD, of u of model at the catalogue's
// standard rates (as the ledger prices a reply); 0 for a model the
// catalogue does not price.
type Pricer func(model string, u usage.Usage) int64

// Difference is a part of the vendor's usage the ledger does not hold, in
// tokens and at the catalogue's prices. Either may be negative: the ledger
// counted more than the vendor.
type Difference struct {
	Usage usage.Usage
	Cost  int64 // nano-USD
}

// Input is one upstream's side of a window.
type Input struct {
	Upstream string
	// Keys maps each of the upstream's vendor key names (as ledger entries
	// name them) to the vendor's id for it (keys[].vendor_key_id).
	Keys map[string]string
	// Vendor is the vendor's report of the window, in buckets of Width.
	Vendor []vendorusage.Row
	// Ledger are the ledger entries of the upstream's requests that started
	// in the window, and Abandoned the attempts abandoned in it.
	Ledger    []account.Settlement
	Abandoned []account.AbandonedAttempt
	Width     time.Duration
	// Price prices the differences; nil prices them at nothing.
	Price Pricer
}

// Row is the reconciliation of one vendor key and model in one bucket.
type Row struct {
	Upstream string
	Start    time.Time
	// VendorKeyID is the vendor's id; VendorKey the gateway's name for it,
	// "" for a key the configuration does not name (its usage is all
	// unexplained).
	VendorKeyID, VendorKey string
	Model                  string
	Vendor, Ledger         usage.Usage
	// LedgerCost is what the ledger charged for the bucket's entries;
	// VendorCost is the vendor's usage at the ledger's prices: LedgerCost
	// plus every difference's cost. Both nano-USD.
	LedgerCost, VendorCost int64
	// Explained are the parts of Vendor − Ledger the ledger accounts for,
	// by class; Unexplained is the rest.
	Explained   map[string]Difference
	Unexplained Difference
	// Entries and Estimated count the bucket's ledger entries and those
	// settled at an estimate; Abandoned its abandoned attempts.
	Entries, Estimated, Abandoned int
}

type rowKey struct {
	start        time.Time
	keyID, model string
}

// Reconcile returns the rows of in, ordered by bucket, key id and model.
// A ledger entry falls in the bucket of its start; its model is the one
// the vendor reported, else the one priced. Entries and attempts at the
// reserve are left out: the vendor's report is the primary's.
func Reconcile(in Input) []Row {
	names := make(map[string]string, len(in.Keys)) // vendor id → name
	for name, id := range in.Keys {
		if id != "" {
			names[id] = name
		}
	}
	rows := map[rowKey]*Row{}
	row := func(k rowKey) *Row {
		r := rows[k]
		if r == nil {
			r = &Row{Upstream: in.Upstream, Start: k.start, VendorKeyID: k.keyID, VendorKey: names[k.keyID], Model: k.model}
			rows[k] = r
		}
		return r
	}
	for _, v := range in.Vendor {
		if v.Tokens == (usage.Usage{}) {
			continue
		}
		r := row(rowKey{v.Start.UTC(), v.KeyID, v.Model})
		r.Vendor = r.Vendor.Add(v.Tokens)
	}
	for _, st := range in.Ledger {
		if st.Endpoint == Reserve {
			continue
		}
		model := string(st.Reported)
		if model == "" {
			model = string(st.Priced)
		}
		r := row(rowKey{st.StartedAt.UTC().Truncate(in.Width), in.Keys[st.VendorKey], model})
		if r.VendorKey == "" {
			// A key with no vendor id: named, so its rows say which.
			r.VendorKey = st.VendorKey
		}
		r.Ledger = r.Ledger.Add(priced(st.Usage))
		r.LedgerCost += st.Cost
		r.Entries++
		if st.Estimated {
			r.Estimated++
		}
	}
	for _, a := range in.Abandoned {
		if a.Endpoint == Reserve {
			continue
		}
		r := row(rowKey{a.At.UTC().Truncate(in.Width), in.Keys[a.VendorKey], a.Model})
		if r.VendorKey == "" {
			r.VendorKey = a.VendorKey
		}
		r.Abandoned++
	}
	out := make([]Row, 0, len(rows))
	for _, r := range rows {
		diff := sub(r.Vendor, r.Ledger)
		d := Difference{Usage: diff, Cost: signedCost(in.Price, r.Model, diff)}
		// The bucket's estimates stand for what the vendor counted of
		// those replies, its abandoned attempts for what it generated
		// unseen: the difference is theirs.
		switch {
		case r.Estimated > 0 && r.Abandoned > 0:
			r.Explained = map[string]Difference{BothClasses: d}
		case r.Estimated > 0:
			r.Explained = map[string]Difference{ClientDisconnect: d}
		case r.Abandoned > 0:
			r.Explained = map[string]Difference{AbandonedAttempts: d}
		default:
			r.Unexplained = d
		}
		r.VendorCost = r.LedgerCost + d.Cost
		out = append(out, *r)
	}
	slices.SortFunc(out, func(a, b Row) int {
		return cmp.Or(a.Start.Compare(b.Start), cmp.Compare(a.VendorKeyID, b.VendorKeyID), cmp.Compare(a.Model, b.Model))
	})
	return out
}

// sub returns u − v, kind by kind.
func sub(u, v usage.Usage) usage.Usage {
	for _, k := range usage.Kinds {
		k.Set(&u, k.Of(u)-k.Of(v))
	}
	return u
}

// priced is u without the kinds counted within others (reasoning, within
// output), which the vendors' reports do not show apart.
func priced(u usage.Usage) usage.Usage {
	for _, k := range usage.Kinds {
		if !k.Priced() {
			k.Set(&u, 0)
		}
	}
	return u
}

// signedCost prices u kind by kind whatever their signs: the cost of the
// kinds above zero less that of the kinds below.
func signedCost(price Pricer, model string, u usage.Usage) int64 {
	if price == nil || u == (usage.Usage{}) {
		return 0
	}
	var pos, neg usage.Usage
	for _, k := range usage.Kinds {
		if v := k.Of(u); v > 0 {
			k.Set(&pos, v)
		} else if v < 0 {
			k.Set(&neg, -v)
		}
	}
	var c int64
	if pos != (usage.Usage{}) {
		c += price(model, pos)
	}
	if neg != (usage.Usage{}) {
		c -= price(model, neg)
	}
	return c
}

// Tokens is the sum of u's token kinds (calls, seconds and images left
// out), as the usage kinds declare them.
func Tokens(u usage.Usage) int64 { return u.Tokens() }
