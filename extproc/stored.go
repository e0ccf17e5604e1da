package extproc

// Objects the vendor keeps (stored responses): the id a reply names is
// bound to the account that made the request and the vendor key that
// served it, and a request naming an id (on an Owned path, or in its body:
// format.Request.Refs) goes on only for that account, steered to that key
// (keys.go, steerToCreator). The operation says which replies name an object (its
// meter implements format.Stored) and where ids appear; the mechanism is
// the same for every operation. Background requests, settled when their
// object ends, are in parked.go.

import (
	"context"
	"slices"
	"time"

	"github.com/modelgateway/gateway/extproc/format"
	"github.com/modelgateway/gateway/internal/account"
)

// bind records the stored response the reply names as the account's. A
// JSON reply is read, and bound, at its last chunk. A stream names its
// response in its first event: the bind is queued beside the stream
// (binder.go), once that event's answer is sent (afterSend), so that the
// event waits for no Redis round trip, and the stream's last chunk waits
// for it. A request naming the id in the sub-millisecond before the bind
// lands is refused with 404, as for any id not the account's: the window
// fails closed.
func (x *exchange) bind(ctx context.Context, last bool) {
	if x.req.NoStore || x.s.owners == nil {
		x.bound = true // nothing is kept to bind
		return
	}
	id, _ := x.stored.Response()
	if id == "" {
		return
	}
	x.bound = true
	if x.op.ValidID == nil || !x.op.ValidID(id) {
		x.s.log.Warn("reply names a malformed response id; not bound", "request_id", x.requestID)
		return
	}
	if last {
		// The reply in one piece: the response and its items in one round
		// trip (they share the owners' records).
		ids := append([]string{id}, x.unsentItems()...)
		x.itemsBound = x.items != nil
		x.s.bindIDs(ctx, x.requestID, x.bindingOf(ids))
		return
	}
	x.beside([]string{id})
}

// beside queues a bind beside the stream: the last chunk waits for
// x.binding, which closes after every bind queued before it, by then long
// landed. Not cut by the client leaving: the response exists at the
// vendor either way.
func (x *exchange) beside(ids []string) {
	x.binding = x.s.binds.add(x.requestID, x.bindingOf(ids))
}

// bindingOf binds ids to the request's account and the vendor key that
// served it, which holds them at the vendor.
func (x *exchange) bindingOf(ids []string) account.Binding {
	return account.Binding{Account: x.key.AccountID, Key: x.vendorKey, IDs: ids}
}

// unsentItems returns the item ids the reply has shown that no bind has
// taken yet, and counts them taken.
func (x *exchange) unsentItems() []string {
	if x.items == nil || x.itemsBound || x.req.NoStore || x.s.owners == nil {
		return nil
	}
	ids := x.items.Items()
	if len(ids) <= x.itemsSent {
		return nil
	}
	fresh := slices.Clone(ids[x.itemsSent:])
	x.itemsSent = len(ids)
	return fresh
}

// bindNewItems binds, beside the stream, the items the reply has shown
// since the last bind: a stream's items show before its end, so its last
// chunk binds only those it shows itself.
func (x *exchange) bindNewItems() {
	if ids := x.unsentItems(); len(ids) > 0 {
		x.beside(ids)
	}
}

// bindItems binds the items the reply has shown (format.StoredItems) that
// no bind took yet, once: at the reply's last chunk, before it is
// released, or when a reply cut short settles.
func (x *exchange) bindItems(ctx context.Context) {
	if x.items == nil || x.itemsBound || x.req.NoStore || x.s.owners == nil {
		return
	}
	ids := x.unsentItems()
	x.itemsBound = true
	x.s.bindIDs(ctx, x.requestID, x.bindingOf(ids))
}

// bindItems binds the item ids meter m has read to account accountID,
// created through vendor key key.
func (s *Server) bindItems(ctx context.Context, requestID string, m format.StoredItems, accountID, key string) {
	s.bindIDs(ctx, requestID, account.Binding{Account: accountID, Key: key, IDs: slices.Clone(m.Items())})
}

// bindIDs makes binding b and waits until it has landed (or failed,
// logged by the binder: the objects then stay unreachable through the
// gateway, refused, never shown to another account).
func (s *Server) bindIDs(ctx context.Context, requestID string, b account.Binding) {
	if len(b.IDs) == 0 || s.owners == nil {
		return
	}
	select {
	case <-s.binds.add(requestID, b):
	case <-ctx.Done():
	}
}

// checkOwner answers 404, in the vendor's words, unless every stored
// object of refs (a response, or an item of one) is bound to the key's
// account through a vendor key the account may still use (the pool's
// pins), all read in one round trip; nil lets the request go on, to the
// first one's creating key. On a socket, a response created on it (store:
// false included) is the account's without asking the store.
func (x *exchange) checkOwner(ctx context.Context, refs ...format.Ref) *Refusal {
	if x.localRef != nil {
		refs = slices.DeleteFunc(slices.Clone(refs), func(r format.Ref) bool {
			return r.Kind == format.StoredResponse && x.localRef(r.ID)
		})
	}
	if len(refs) == 0 {
		return nil
	}
	if x.s.owners == nil {
		return x.reject(format.NotFound, "stored responses are not available through this gateway", 0)
	}
	ids := make([]string, len(refs))
	for i, r := range refs {
		ids[i] = r.ID
	}
	owners, keys, err := x.s.owners.ResponseOwners(ctx, ids)
	if err != nil {
		x.s.log.Error("response owner lookup failed", "err", err)
		x.s.metrics.storeErrors.WithLabelValues("owner").Inc()
		return x.reject(format.Unavailable, "the gateway's store is unavailable; retry shortly", time.Second)
	}
	for i, owner := range owners {
		if owner == "" || owner != x.key.AccountID {
			return x.reject(format.NotFound, refs[i].NotFound(), 0)
		}
		if p := x.upstream.Pool; p != nil && p.Forbids(x.key.AccountID, keys[i]) {
			// Its key's vendor account keeps it, and the account's pins
			// changed since: serving it would cross them.
			return x.refuseFinal(format.NotFound, refs[i].NotFound()+" It was stored through a vendor key this account's requests no longer use; send the conversation in full instead.", 0)
		}
		if x.creator == "" {
			x.creator = keys[i]
		}
	}
	return nil
}

// Owners binds stored responses to the accounts that created them (the
// store implements it).
type Owners interface {
	// Bind binds stored responses and their items (ids later requests
	// may name alone) to the accounts that created them, in one round trip.
	Bind(ctx context.Context, bs ...account.Binding) error
	// ResponseOwners reads the owners of many ids in one round trip, and
	// the vendor keys that created them.
	ResponseOwners(ctx context.Context, ids []string) (owners, keys []string, err error)
}
