package redisstate

import (
	"context"
	"errors"
	"slices"

	goredis "github.com/redis/go-redis/v9"

	"github.com/lockapi/lockapi/internal/lock"
	"github.com/lockapi/lockapi/internal/webhook"
)

func (s *State) AddDeadLetter(ctx context.Context, id string, d webhook.DeadLetter) error {
	ctx, cancel := s.call(ctx)
	defer cancel()
	data, err := stored(d)
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
	if err != nil {
		return fail(err)
	}
	s.changed(ctx, id)
	return nil
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
		err := s.decode(all[eid], key+" "+eid, &d)
		if errors.Is(err, errUnknownLayout) {
			continue // told: a newer instance shows it
		}
		if err != nil {
			return nil, &lock.Error{Code: lock.CodeInternal, Detail: "a stored dead letter does not decode", Err: err}
		}
		out = append(out, d)
	}
	return out, nil
}
