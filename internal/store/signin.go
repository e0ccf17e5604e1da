package store

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

//go:embed lua/signin.lua
var signInLua string

var signInScript = redis.NewScript(signInLua)

// SignInLimits bound the operator console's sign-in attempts per Window:
// from one client address, and against one credential.
type SignInLimits struct {
	Window        time.Duration
	PerAddr       int
	PerCredential int
}

// SignInAttempt counts one sign-in attempt from addr against credential,
// in counters every sidecar shares (lua/signin.lua). credential names what
// the attempt would sign in to; it becomes part of a key name as given,
// so it must be an opaque name (a hash), never a secret. It reports
// whether the attempt is within the limits; when it is not, it is counted
// nowhere and retryAfter says when it would be.
func (s *Store) SignInAttempt(ctx context.Context, addr, credential string, l SignInLimits) (ok bool, retryAfter time.Duration, err error) {
	now := s.now().UnixMilli()
	var member [8]byte
	rand.Read(member[:]) // never fails
	keys := []string{"gw:{signin}:addr:" + addr, "gw:{signin}:cred:" + credential}
	res, err := signInScript.Run(ctx, s.rdb, keys,
		now, l.Window.Milliseconds(), l.PerAddr, l.PerCredential,
		strconv.FormatInt(now, 10)+"-"+hex.EncodeToString(member[:])).Int64Slice()
	if err != nil {
		return false, 0, fmt.Errorf("store: sign-in attempt: %w", err)
	}
	if len(res) != 2 {
		return false, 0, fmt.Errorf("store: sign-in attempt: reply %v", res)
	}
	return res[0] == 1, time.Duration(res[1]) * time.Millisecond, nil
}
