package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/modelgateway/gateway/internal/account"
)

// Stored responses belong to the account that created them. The vendor
// keeps a response (readable, continuable, deletable by its id) for anyone
// holding the vendor key, and behind the gateway every account shares that
// key: the gateway records each response id it sees created with the
// creating account, and forwards a request naming an id only for that
// account.
//
// One key per response, "gw:resp:<id>" holding the account id, and beside
// it "gw:respkey:<id>" naming the vendor key that created it (where the
// vendor keeps it: a pool's keys may belong to different vendor accounts),
// each written once
// (SET NX) with a lifetime of ResponseTTL: a single-key command, so Redis
// Cluster places it anywhere. Ids are at most 128 bytes of [A-Za-z0-9_-]
// (the caller checks), account ids are bounded likewise, so a record is
// under 200 bytes and lives no longer than the vendor keeps the response.

// DefaultResponseTTL is how long an ownership record lives: the vendor
// keeps a stored response for 30 days.
const DefaultResponseTTL = 30 * 24 * time.Hour

func responseKey(id string) string { return "gw:resp:" + id }

func responseVendorKey(id string) string { return "gw:respkey:" + id }

// Bind records, for each binding, that its account created the stored
// responses and items of its ids (a response's output items: messages,
// function calls, reasoning...), which a later request may name by id
// alone. Items share the responses' records (an item id never equals a
// response id), so ResponseOwners reads either; an id already bound keeps
// its first owner. One pipelined round trip for all of them.
func (s *Store) Bind(ctx context.Context, bs ...account.Binding) error {
	ttl := s.opts.ResponseTTL
	if ttl <= 0 {
		ttl = DefaultResponseTTL
	}
	pipe := s.rdb.Pipeline()
	for _, b := range bs {
		for _, id := range b.IDs {
			pipe.SetNX(ctx, responseKey(id), b.Account, ttl)
			if b.Key != "" {
				pipe.SetNX(ctx, responseVendorKey(id), b.Key, ttl)
			}
		}
	}
	if pipe.Len() == 0 {
		return nil
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("store: bind: %w", err)
	}
	return nil
}

// ResponseOwners returns the account that created each response (or
// item) of ids, "" for one no account did, and the vendor key it was
// created through ("" when not recorded): one pipelined round trip
// whatever their number (a request may name many).
func (s *Store) ResponseOwners(ctx context.Context, ids []string) (owners, keys []string, err error) {
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.StringCmd, 2*len(ids))
	for i, id := range ids {
		cmds[2*i], cmds[2*i+1] = pipe.Get(ctx, responseKey(id)), pipe.Get(ctx, responseVendorKey(id))
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, nil, fmt.Errorf("store: response owners: %w", err)
	}
	vs := make([]string, len(cmds))
	for i, c := range cmds {
		v, err := c.Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return nil, nil, fmt.Errorf("store: response owners: %w", err)
		}
		vs[i] = v
	}
	owners, keys = make([]string, len(ids)), make([]string, len(ids))
	for i := range ids {
		owners[i], keys[i] = vs[2*i], vs[2*i+1]
	}
	return owners, keys, nil
}

// ResponseOwner returns the account that created response (or item) id,
// "" when no account did (or its record has expired).
func (s *Store) ResponseOwner(ctx context.Context, id string) (string, error) {
	owner, err := s.rdb.Get(ctx, responseKey(id)).Result()
	if errors.Is(err, redis.Nil) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("store: response owner: %w", err)
	}
	return owner, nil
}
