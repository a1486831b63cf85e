// Package redisstate keeps webhook.State in Redis, so that every lockapi
// instance on that Redis shares the subscriptions, cursors and dead
// letters, and they survive restarts.
//
// It uses plain commands, no scripts. Keys, under the store's prefix:
//
//	webhooks:subs                  hash: subscription id -> JSON (secrets included)
//	webhooks:dedupe                hash: DedupeKey -> subscription id
//	webhooks:{wh:<id>}:cursor      string: the last event id the subscription is done with
//	webhooks:{wh:<id>}:dead        hash: event id -> dead letter JSON
//	webhooks:{wh:<id>}:replay      hash: event id -> dead letter JSON, queued for replay
//
// A subscription's own keys share the hash tag {wh:<id>}, so the commands
// that touch several of them at once (MULTI, DEL) work on Redis Cluster too;
// no command touches keys of two subscriptions. The same code serves a
// single Redis, Sentinel and Cluster.
package redisstate

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/lockapi/lockapi/internal/lock"
	"github.com/lockapi/lockapi/internal/webhook"
)

// DefaultCallTimeout bounds each Redis call when Options give none.
const DefaultCallTimeout = 5 * time.Second

// State is a webhook.State in Redis.
type State struct {
	rdb     goredis.UniversalClient
	prefix  string
	timeout time.Duration
}

var _ webhook.State = (*State)(nil)

// New returns a State on rdb whose keys start with prefix + "webhooks:".
// timeout bounds each call (DefaultCallTimeout when 0).
func New(rdb goredis.UniversalClient, prefix string, timeout time.Duration) *State {
	if timeout <= 0 {
		timeout = DefaultCallTimeout
	}
	return &State{rdb: rdb, prefix: prefix + "webhooks:", timeout: timeout}
}

func (s *State) subsKey() string             { return s.prefix + "subs" }
func (s *State) dedupeKey() string           { return s.prefix + "dedupe" }
func (s *State) tag(id string) string        { return s.prefix + "{wh:" + id + "}" }
func (s *State) cursorKey(id string) string  { return s.tag(id) + ":cursor" }
func (s *State) deadKey(id string) string    { return s.tag(id) + ":dead" }
func (s *State) replaysKey(id string) string { return s.tag(id) + ":replay" }

func (s *State) call(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.timeout)
}

// fail wraps a Redis failure as unavailable.
func fail(err error) error {
	if err == nil {
		return nil
	}
	var le *lock.Error
	if errors.As(err, &le) {
		return err
	}
	return lock.Unavailable(err)
}

func (s *State) Create(ctx context.Context, sub webhook.Subscription, cursor string) error {
	ctx, cancel := s.call(ctx)
	defer cancel()
	data, err := json.Marshal(sub)
	if err != nil {
		return err
	}
	key := sub.DedupeKey()
	claimed, err := s.rdb.HSetNX(ctx, s.dedupeKey(), key, sub.ID).Result()
	if err != nil {
		return fail(err)
	}
	if !claimed {
		other, err := s.rdb.HGet(ctx, s.dedupeKey(), key).Result()
		if err != nil && !errors.Is(err, goredis.Nil) {
			return fail(err)
		}
		exists, err := s.rdb.HExists(ctx, s.subsKey(), other).Result()
		if err != nil {
			return fail(err)
		}
		if exists {
			return webhook.Exists(other)
		}
		// A create that claimed the key died before it added its
		// subscription, or a delete died half-way: the claim is stale.
		if err := s.rdb.HSet(ctx, s.dedupeKey(), key, sub.ID).Err(); err != nil {
			return fail(err)
		}
	}
	// The cursor first: once the subscription is listed, a worker may
	// start on it, and must find where to start.
	if err := s.rdb.Set(ctx, s.cursorKey(sub.ID), cursor, 0).Err(); err != nil {
		return fail(err)
	}
	return fail(s.rdb.HSet(ctx, s.subsKey(), sub.ID, data).Err())
}

func (s *State) List(ctx context.Context) ([]webhook.Subscription, error) {
	ctx, cancel := s.call(ctx)
	defer cancel()
	all, err := s.rdb.HGetAll(ctx, s.subsKey()).Result()
	if err != nil {
		return nil, fail(err)
	}
	out := make([]webhook.Subscription, 0, len(all))
	for id, data := range all {
		var sub webhook.Subscription
		if err := json.Unmarshal([]byte(data), &sub); err != nil {
			return nil, &lock.Error{Code: lock.CodeInternal, Detail: "a stored webhook does not decode", Err: errors.Join(errors.New(id), err)}
		}
		out = append(out, sub)
	}
	return out, nil
}

func (s *State) Get(ctx context.Context, id string) (webhook.Subscription, error) {
	ctx, cancel := s.call(ctx)
	defer cancel()
	data, err := s.rdb.HGet(ctx, s.subsKey(), id).Result()
	if errors.Is(err, goredis.Nil) {
		return webhook.Subscription{}, webhook.NotFound(id)
	}
	if err != nil {
		return webhook.Subscription{}, fail(err)
	}
	var sub webhook.Subscription
	if err := json.Unmarshal([]byte(data), &sub); err != nil {
		return webhook.Subscription{}, &lock.Error{Code: lock.CodeInternal, Detail: "a stored webhook does not decode", Err: err}
	}
	return sub, nil
}

func (s *State) Delete(ctx context.Context, id string) error {
	sub, err := s.Get(ctx, id)
	if err != nil {
		return err
	}
	ctx, cancel := s.call(ctx)
	defer cancel()
	if err := s.rdb.HDel(ctx, s.subsKey(), id).Err(); err != nil {
		return fail(err)
	}
	// The dedupe entry goes only if it is still this subscription's; a
	// stale one is taken over by the next create anyway.
	key := sub.DedupeKey()
	if owner, err := s.rdb.HGet(ctx, s.dedupeKey(), key).Result(); err == nil && owner == id {
		if err := s.rdb.HDel(ctx, s.dedupeKey(), key).Err(); err != nil {
			return fail(err)
		}
	}
	return fail(s.rdb.Del(ctx, s.cursorKey(id), s.deadKey(id), s.replaysKey(id)).Err())
}

func (s *State) Cursor(ctx context.Context, id string) (string, bool, error) {
	ctx, cancel := s.call(ctx)
	defer cancel()
	c, err := s.rdb.Get(ctx, s.cursorKey(id)).Result()
	if errors.Is(err, goredis.Nil) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fail(err)
	}
	return c, true, nil
}

func (s *State) SetCursor(ctx context.Context, id, cursor string) error {
	ctx, cancel := s.call(ctx)
	defer cancel()
	return fail(s.rdb.Set(ctx, s.cursorKey(id), cursor, 0).Err())
}

func (s *State) AddDeadLetter(ctx context.Context, id string, d webhook.DeadLetter) error {
	ctx, cancel := s.call(ctx)
	defer cancel()
	data, err := json.Marshal(d)
	if err != nil {
		return err
	}
	key := s.deadKey(id)
	if err := s.rdb.HSet(ctx, key, d.EventID, data).Err(); err != nil {
		return fail(err)
	}
	n, err := s.rdb.HLen(ctx, key).Result()
	if err != nil || n <= webhook.MaxDeadLetters {
		return fail(err)
	}
	ids, err := s.rdb.HKeys(ctx, key).Result()
	if err != nil {
		return fail(err)
	}
	slices.SortFunc(ids, lock.CompareEventIDs)
	if over := len(ids) - webhook.MaxDeadLetters; over > 0 {
		return fail(s.rdb.HDel(ctx, key, ids[:over]...).Err())
	}
	return nil
}

func (s *State) DeadLetters(ctx context.Context, id, after string, limit int) ([]webhook.DeadLetter, error) {
	return s.letters(ctx, s.deadKey(id), after, limit)
}

func (s *State) Replay(ctx context.Context, id, eventID string) error {
	ctx, cancel := s.call(ctx)
	defer cancel()
	data, err := s.rdb.HGet(ctx, s.deadKey(id), eventID).Result()
	if errors.Is(err, goredis.Nil) {
		return webhook.DeadLetterNotFound(id, eventID)
	}
	if err != nil {
		return fail(err)
	}
	// Both keys carry the subscription's hash tag: one MULTI, on Cluster
	// too.
	_, err = s.rdb.TxPipelined(ctx, func(p goredis.Pipeliner) error {
		p.HSet(ctx, s.replaysKey(id), eventID, data)
		p.HDel(ctx, s.deadKey(id), eventID)
		return nil
	})
	return fail(err)
}

func (s *State) Replays(ctx context.Context, id string, limit int) ([]webhook.DeadLetter, error) {
	return s.letters(ctx, s.replaysKey(id), "", limit)
}

func (s *State) DoneReplay(ctx context.Context, id, eventID string) error {
	ctx, cancel := s.call(ctx)
	defer cancel()
	return fail(s.rdb.HDel(ctx, s.replaysKey(id), eventID).Err())
}

// letters returns up to limit letters of the hash key after the event id
// after, in event order.
func (s *State) letters(ctx context.Context, key, after string, limit int) ([]webhook.DeadLetter, error) {
	ctx, cancel := s.call(ctx)
	defer cancel()
	all, err := s.rdb.HGetAll(ctx, key).Result()
	if err != nil {
		return nil, fail(err)
	}
	ids := make([]string, 0, len(all))
	for eid := range all {
		if after == "" || lock.CompareEventIDs(eid, after) > 0 {
			ids = append(ids, eid)
		}
	}
	slices.SortFunc(ids, lock.CompareEventIDs)
	if limit > 0 && len(ids) > limit {
		ids = ids[:limit]
	}
	out := make([]webhook.DeadLetter, 0, len(ids))
	for _, eid := range ids {
		var d webhook.DeadLetter
		if err := json.Unmarshal([]byte(all[eid]), &d); err != nil {
			return nil, &lock.Error{Code: lock.CodeInternal, Detail: "a stored dead letter does not decode", Err: err}
		}
		out = append(out, d)
	}
	return out, nil
}
