package store

import (
	"context"
	_ "embed"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/config"
)

// The Lua scripts. Each runs with EVALSHA (EVAL when the server does not know
// it yet) and touches only keys passed in KEYS: those of one account, or
// (settlement) of the accounts of one Redis Cluster slot.
var (
	//go:embed lua/admit.lua
	admitLua string
	//go:embed lua/settle.lua
	settleLua string
	//go:embed lua/settlebatch.lua
	settleLoopLua string
	//go:embed lua/topup.lua
	topUpLua string
	//go:embed lua/hsetx.lua
	hsetxLua string
	//go:embed lua/revoke.lua
	revokeLua string
	//go:embed lua/expire.lua
	expireLua string
	//go:embed lua/renew.lua
	renewLua string
	//go:embed lua/sweep.lua
	sweepLua string
	//go:embed lua/lease.lua
	leaseLua string
	//go:embed lua/record.lua
	recordLua string
	//go:embed lua/trim.lua
	trimLua string
	//go:embed lua/project.lua
	projectLua string
	// holdLua reads and writes a hold's value; the scripts that touch holds
	// start with it.
	//go:embed lua/hold.lua
	holdLua string

	// leaseFieldLua reads and writes a lease's field; the scripts that touch
	// leases start with it.
	//go:embed lua/leasefield.lua
	leaseFieldLua string

	admitScript   = redis.NewScript(holdLua + admitLua)
	settleScript  = redis.NewScript(holdLua + leaseFieldLua + settleBatchLua)
	topUpScript   = redis.NewScript(topUpLua)
	hsetxScript   = redis.NewScript(hsetxLua)
	revokeScript  = redis.NewScript(revokeLua)
	expireScript  = redis.NewScript(expireLua)
	renewScript   = redis.NewScript(holdLua + renewLua)
	sweepScript   = redis.NewScript(holdLua + leaseFieldLua + sweepLua)
	trimScript    = redis.NewScript(trimLua)
	projectScript = redis.NewScript(projectLua)
	leaseScript   = redis.NewScript(leaseFieldLua + leaseLua)
	recordScript  = redis.NewScript(holdLua + leaseFieldLua + recordLua)
)

// settleBatchLua runs settle.lua for each account of a batch: its body
// becomes a local function of its KEYS and ARGV, called once per account
// by settlebatch.lua, and stays the one place for what a settlement does.
var settleBatchLua = "local function settle_account(KEYS, ARGV)\n" + settleLua + "\nend\n" + settleLoopLua

// Defaults of Options.
const (
	defaultAuditMaxLen = 100_000

	// A sweep's record outlives any wait of a spooled settlement but a
	// week-long one.
	defaultSweptRecordTTL = 7 * 24 * time.Hour
	// Day keys outlive the longest month (a month's usage is the sum of its
	// days) and the console's daily series (MaxSeriesDays).
	dayKeyTTL = 92 * 24 * time.Hour
	// A month's spend is read during its month only.
	monthKeyTTL = 32 * 24 * time.Hour
)

// New returns a Store on rdb, which may be a standalone, failover or cluster
// client.
func New(rdb redis.UniversalClient, opts Options) *Store {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.HoldTTL <= 0 {
		opts.HoldTTL = config.DefaultHoldLease
	}
	if opts.SweptRecordTTL <= 0 {
		opts.SweptRecordTTL = defaultSweptRecordTTL
	}
	if opts.AuditMaxLen <= 0 {
		opts.AuditMaxLen = defaultAuditMaxLen
	}
	return &Store{rdb: rdb, opts: opts}
}

// Ping checks that Redis answers: on a Redis Cluster, every master, since
// each holds the keys of some accounts.
func (s *Store) Ping(ctx context.Context) error {
	if c, ok := s.rdb.(*redis.ClusterClient); ok {
		return pingMasters(ctx, c)
	}
	if err := s.rdb.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("store: ping: %w", err)
	}
	return nil
}

// ShardsDown is Ping's error when some masters of a Redis Cluster did not
// answer.
type ShardsDown struct {
	Addrs []string // the masters' addresses, sorted
	Err   error    // the first one's error
}

func (e *ShardsDown) Error() string {
	return fmt.Sprintf("shards %s: %v", strings.Join(e.Addrs, ", "), e.Err)
}

func (e *ShardsDown) Unwrap() error { return e.Err }

// pingMasters pings every master of the slot map, which ForEachMaster
// reloads first: a master that failed over drops out of it once its
// replica is promoted.
func pingMasters(ctx context.Context, c *redis.ClusterClient) error {
	var (
		mu   sync.Mutex
		down = map[string]error{}
	)
	err := c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		if err := m.Ping(ctx).Err(); err != nil {
			mu.Lock()
			down[m.Options().Addr] = err
			mu.Unlock()
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("store: ping: %w", err)
	}
	if len(down) == 0 {
		return nil
	}
	e := &ShardsDown{Addrs: slices.Sorted(maps.Keys(down))}
	e.Err = down[e.Addrs[0]]
	return fmt.Errorf("store: ping: %w", e)
}

func (s *Store) now() time.Time { return s.opts.Now().UTC() }

// Key layout. Every key of one account carries the hash tag {acct:ID}; the
// account index, the credential index and the audit stream are global.
const (
	accountsKey = "gw:accounts" // set of account ids
	auditKey    = "gw:audit"    // stream of audit entries
)

// acctKey names one of account id's keys: gw:{acct:ID}:suffix.
func acctKey(id, suffix string) string { return "gw:{acct:" + id + "}:" + suffix }

// accountSlot is the Redis Cluster hash slot of account id's keys: that of
// their hash tag.
func accountSlot(id string) int { return hashSlot("acct:" + id) }

// hashSlot is the Redis Cluster hash slot of a hash tag: CRC16/XMODEM
// modulo 16384, as the cluster specification gives it.
func hashSlot(tag string) int {
	var crc uint16
	for _, b := range []byte(tag) {
		crc ^= uint16(b) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc % 16384)
}

// keyHashKey names the credential index record of a secret's SHA-256.
func keyHashKey(hexHash string) string { return "gw:keyhash:" + hexHash }

func dayStamp(t time.Time) string { return t.Format("20060102") }

func monthStamp(t time.Time) string { return t.Format("200601") }

// validID reports whether id is safe inside a key name and its hash tag. Ids
// made by the store are letters, digits and '_'; anything else cannot exist.
func validID(id string) bool {
	if id == "" || len(id) > 64 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// ms encodes t as unix milliseconds; the zero time is "0".
func ms(t time.Time) string {
	if t.IsZero() {
		return "0"
	}
	return strconv.FormatInt(t.UnixMilli(), 10)
}

// parseMS decodes ms; "0", "" and garbage are the zero time.
func parseMS(s string) time.Time {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n == 0 {
		return time.Time{}
	}
	return time.UnixMilli(n).UTC()
}

// parseInt decodes an integer field; absent or garbage is 0.
func parseInt(s string) int64 {
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}

// str converts a reply element from HMGET and the like; nil is "".
func str(v any) string {
	s, _ := v.(string)
	return s
}

func boolString(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// namedProject reports whether id names a project of its own: not the
// default project, whose requests count against their key and account only.
func namedProject(id string) bool {
	return id != "" && id != account.DefaultProject && validID(id)
}
