// Package redis fences a resource kept in Redis: see package
// [github.com/lockapi/lockapi/fence] for the rule. A Guard keeps the
// highest admitted token in a key; its Write sets a data key in the same
// script, only when the token is admitted.
//
// It needs no SQL driver: a program that guards only Redis resources
// imports neither database/sql nor pgx through it.
package redis

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/lockapi/lockapi/fence"
)

//go:embed admit.lua
var admitLua string

// admitScript runs with EVALSHA, falling back to EVAL on NOSCRIPT.
var admitScript = redis.NewScript(admitLua)

// Guard fences a resource kept in Redis. The highest admitted token
// lives in a token key of its own, one per resource, without a TTL. Keep it
// on a Redis that persists it: a fence that loses its token admits stale
// writers again.
type Guard struct {
	// Client runs the script: a *redis.Client, *redis.ClusterClient or
	// *redis.Ring.
	Client redis.Scripter
}

// Admit admits token under tokenKey, or returns fence.ErrStale if a higher token
// was admitted before. Admit alone only records the token; use Write to make
// the guarded write in the same step, because a write made after Admit
// returns is not fenced: another writer may have been admitted in between.
func (g Guard) Admit(ctx context.Context, tokenKey string, token uint64) error {
	if tokenKey == "" {
		return fence.ErrNoResource
	}
	return g.run(ctx, []string{tokenKey}, token)
}

// Write sets dataKey to value if token is admitted under tokenKey, in one
// atomic step; for a stale token it returns fence.ErrStale and leaves dataKey as it
// was. In a Redis Cluster, both keys must hash to one slot: give them a
// common hash tag, such as "{account:7}:fence" and "{account:7}:data".
func (g Guard) Write(ctx context.Context, tokenKey, dataKey string, token uint64, value string) error {
	if tokenKey == "" || dataKey == "" {
		return fence.ErrNoResource
	}
	return g.run(ctx, []string{tokenKey, dataKey}, token, value)
}

func (g Guard) run(ctx context.Context, keys []string, token uint64, value ...any) error {
	if token > fence.MaxToken {
		return fence.ErrTokenRange
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
		return fence.ErrStale
	default:
		return fmt.Errorf("fence: admit token %d under %q: script returned %d", token, keys[0], n)
	}
}
