package redis

import (
	"context"
	"strconv"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/lockapi/lockapi/internal/lock"
)

// Session quotas (lock.SessionRequest.Quota). Each principal's sessions are
// counted in Redis, so that the bound holds over every instance: a sorted
// set per principal, <prefix>sessions:by-principal:<principal>, whose
// members are session ids scored by their expiry in ms when last looked
// at (plus quotaClockSlack). A create adds its id and counts in one
// MULTI; when the count passes the quota it first looks again at the
// members whose score has passed (a renewal does not touch the set, so
// that it costs what it did: those may live on) and takes out the ones
// that ended; past the quota still, it takes its own id out and refuses.
// Two creates that race near the bound may so both refuse, never both
// pass: the count never exceeds the quota. A deleted session leaves the
// set at once. The set is a single key, and every command names one key,
// so the same code serves a single Redis, Sentinel and Cluster.
//
// The set holds at most about quota members (a create past it takes its
// id out again), and it is kept while its principal has one.

// quotaClockSlack is added to a member's expiry, so that an instance
// whose clock runs ahead of Redis's does not count out a session that
// lives.
const quotaClockSlack = time.Second

func (k keyspace) sessionQuotaKey(principal string) string {
	return k.prefix + "sessions:by-principal:" + principal
}

// claimSession counts session id, to live for req.TTL, against req's
// quota: it fails with CodeQuotaExceeded, and leaves the count as it
// was, when the principal has req.Quota live sessions already.
func (ss *sessions) claimSession(ctx context.Context, id string, req lock.SessionRequest) error {
	ctx, cancel := context.WithTimeout(ctx, ss.s.callTimeout)
	defer cancel()
	key := ss.s.sessionQuotaKey(req.Principal)
	now := time.Now()
	var card *goredis.IntCmd
	var passed *goredis.StringSliceCmd
	_, err := ss.s.rdb.TxPipelined(ctx, func(p goredis.Pipeliner) error {
		p.ZAdd(ctx, key, goredis.Z{Score: quotaScore(now.Add(req.TTL)), Member: id})
		card = p.ZCard(ctx, key)
		passed = p.ZRangeByScore(ctx, key, &goredis.ZRangeBy{Min: "-inf", Max: "(" + strconv.FormatInt(now.UnixMilli(), 10)})
		return nil
	})
	if err != nil {
		return storeError(err)
	}
	n := card.Val()
	if n > int64(req.Quota) && len(passed.Val()) > 0 {
		if n, err = ss.recount(ctx, key, passed.Val(), now); err != nil {
			ss.unclaimSession(ctx, req.Principal, id)
			return err
		}
	}
	if n > int64(req.Quota) {
		ss.unclaimSession(ctx, req.Principal, id)
		return lock.QuotaExceeded("sessions", req.Quota)
	}
	return nil
}

// recount looks at the sessions ids whose scores in key have passed: one
// that lives on (renewed) gets its expiry as its score, one that ended
// leaves. It returns the count after. It reads every session in one
// pipeline and writes the set in another (a Cluster client splits the
// reads by node): a principal with a thousand renewed sessions costs two
// round trips, not two thousand inside one call's deadline.
func (ss *sessions) recount(ctx context.Context, key string, ids []string, now time.Time) (int64, error) {
	reads := make([]*goredis.SliceCmd, len(ids))
	if _, err := ss.s.rdb.Pipelined(ctx, func(p goredis.Pipeliner) error {
		for i, id := range ids {
			reads[i] = p.HMGet(ctx, ss.s.sessionKey(id), "exp", "ended")
		}
		return nil
	}); err != nil {
		return 0, storeError(err)
	}
	var card *goredis.IntCmd
	if _, err := ss.s.rdb.Pipelined(ctx, func(p goredis.Pipeliner) error {
		for i, id := range ids {
			v := reads[i].Val()
			exp, _ := v[0].(string)
			ms, perr := strconv.ParseInt(exp, 10, 64)
			if ended, _ := v[1].(string); perr != nil || ended != "" || time.UnixMilli(ms).Add(quotaClockSlack).Before(now) {
				p.ZRem(ctx, key, id)
			} else {
				p.ZAddXX(ctx, key, goredis.Z{Score: quotaScore(time.UnixMilli(ms)), Member: id})
			}
		}
		card = p.ZCard(ctx, key)
		return nil
	}); err != nil {
		return 0, storeError(err)
	}
	return card.Val(), nil
}

// unclaimSession stops counting session id of principal: it ended, or was
// never made. A failure leaves it counted until a create past the quota
// finds it ended.
func (ss *sessions) unclaimSession(ctx context.Context, principal, id string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ss.s.callTimeout)
	defer cancel()
	_ = ss.s.rdb.ZRem(ctx, ss.s.sessionQuotaKey(principal), id).Err()
}

func quotaScore(expires time.Time) float64 {
	return float64(expires.Add(quotaClockSlack).UnixMilli())
}
