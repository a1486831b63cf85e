package fence

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
)

//go:embed admit.lua
var admitLua string

// admitScript runs with EVALSHA, falling back to EVAL on NOSCRIPT.
var admitScript = redis.NewScript(admitLua)

// RedisGuard fences a resource kept in Redis. The highest admitted token
// lives in a token key of its own, one per resource, without a TTL. Keep it
// on a Redis that persists it: a fence that loses its token admits stale
// writers again.
type RedisGuard struct {
	// Client runs the script: a *redis.Client, *redis.ClusterClient or
	// *redis.Ring.
	Client redis.Scripter
}

// Admit admits token under tokenKey, or returns ErrStale if a higher token
// was admitted before. Admit alone only records the token; use Write to make
// the guarded write in the same step, because a write made after Admit
// returns is not fenced: another writer may have been admitted in between.
func (g RedisGuard) Admit(ctx context.Context, tokenKey string, token uint64) error {
	if tokenKey == "" {
		return ErrNoResource
	}
	return g.run(ctx, []string{tokenKey}, token)
}

// Write sets dataKey to value if token is admitted under tokenKey, in one
// atomic step; for a stale token it returns ErrStale and leaves dataKey as it
// was. In a Redis Cluster, both keys must hash to one slot: give them a
// common hash tag, such as "{account:7}:fence" and "{account:7}:data".
func (g RedisGuard) Write(ctx context.Context, tokenKey, dataKey string, token uint64, value string) error {
	if tokenKey == "" || dataKey == "" {
		return ErrNoResource
	}
	return g.run(ctx, []string{tokenKey, dataKey}, token, value)
}

func (g RedisGuard) run(ctx context.Context, keys []string, token uint64, value ...any) error {
	if token > MaxToken {
		return ErrTokenRange
	}
	args := append([]any{strconv.FormatUint(token, 10)}, value...)
	n, err := admitScript.Run(ctx, g.Client, keys, args...).Int64()
	if err != nil {
		return fmt.Errorf("fence: admit token %d under %q: %w", token, keys[0], err)
	}
	switch n {
	case 1:
		return nil
	case 0:
		return ErrStale
	default:
		return fmt.Errorf("fence: admit token %d under %q: script returned %d", token, keys[0], n)
	}
}
