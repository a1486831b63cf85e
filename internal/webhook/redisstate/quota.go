package redisstate

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/oklog/ulid/v2"
	goredis "github.com/redis/go-redis/v9"

	"github.com/lockapi/lockapi/internal/lock"
	"github.com/lockapi/lockapi/internal/webhook"
)

// claim counts sub against its principal's quota, in Redis so that the
// bound holds over every instance: its id joins the principal's set
// first, and the set is counted after. Past the quota it takes out the
// ids whose subscriptions are gone (a create or a delete that died half
// way), counts again, and past it still takes its own id out and fails.
// Two creates racing near the bound may so both fail, never both pass.
func (s *State) claim(ctx context.Context, sub webhook.Subscription, quota int) error {
	key := s.ownedKey(sub.Principal)
	var n *goredis.IntCmd
	_, err := s.rdb.TxPipelined(ctx, func(p goredis.Pipeliner) error {
		p.SAdd(ctx, key, sub.ID)
		n = p.SCard(ctx, key)
		return nil
	})
	if err != nil {
		return fail(err)
	}
	count := n.Val()
	if count > int64(quota) {
		if count, err = s.recount(ctx, key, sub.ID); err != nil {
			_ = s.rdb.SRem(ctx, key, sub.ID).Err()
			return err
		}
	}
	if count > int64(quota) {
		if err := s.rdb.SRem(ctx, key, sub.ID).Err(); err != nil {
			return fail(err)
		}
		return lock.QuotaExceeded("webhooks", quota)
	}
	return nil
}

// claimGrace is how long an id may be counted before its subscription is
// listed: a create between its claim and its listing makes a few calls,
// each within the State's call timeout.
const claimGrace = time.Minute

// young reports whether id (a ULID, as webhook.NewID makes them) was made
// less than claimGrace ago: its create may still be on its way.
func young(id string) bool {
	u, err := ulid.ParseStrict(strings.ToUpper(id))
	return err == nil && time.Since(ulid.Time(u.Time())) < claimGrace
}

// recount takes out of the principal's set key the ids whose
// subscriptions are gone, but for mine (being created), and counts again.
func (s *State) recount(ctx context.Context, key, mine string) (int64, error) {
	ids, err := s.rdb.SMembers(ctx, key).Result()
	if err != nil {
		return 0, fail(err)
	}
	ids = slices.DeleteFunc(ids, func(id string) bool { return id == mine })
	if len(ids) == 0 {
		return 1, nil
	}
	subs, err := s.rdb.HMGet(ctx, s.subsKey(), ids...).Result()
	if err != nil {
		return 0, fail(err)
	}
	var gone []any
	for i, v := range subs {
		if v == nil && !young(ids[i]) {
			gone = append(gone, ids[i])
		}
	}
	if len(gone) > 0 {
		if err := s.rdb.SRem(ctx, key, gone...).Err(); err != nil {
			return 0, fail(err)
		}
	}
	return int64(len(ids)-len(gone)) + 1, nil
}
