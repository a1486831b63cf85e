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
//	webhooks:by-principal:<p>      set: the ids of principal p's subscriptions, for its quota
//
// A subscription's own keys share the hash tag {wh:<id>}, so the commands
// that touch several of them at once (MULTI, DEL) work on Redis Cluster too;
// no command touches keys of two subscriptions. The same code serves a
// single Redis, Sentinel and Cluster.
//
// Creating or deleting a subscription and queueing a replay also PUBLISH the
// subscription's id on the channel webhooks:changed (under the prefix), to
// which Changes subscribes: instances read the subscriptions when they
// change instead of polling. It is classic pub/sub, which Redis Cluster
// delivers to the subscribers on every node.
package redisstate

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/lockapi/lockapi/internal/layout"
	"github.com/lockapi/lockapi/internal/lock"
	"github.com/lockapi/lockapi/internal/webhook"
)

// DefaultCallTimeout bounds each Redis call when Options give none.
const DefaultCallTimeout = 5 * time.Second

// defaultHealthEvery is how long the connection of Changes may stay silent
// before a PING checks that it still works: a connection that died
// silently would miss every notice.
const defaultHealthEvery = 5 * time.Minute

// Bounds of the wait between two tries to subscribe to the notices.
const resubscribeMin, resubscribeMax = 100 * time.Millisecond, 5 * time.Second

// State is a webhook.State in Redis.
type State struct {
	rdb     goredis.UniversalClient
	prefix  string
	timeout time.Duration
	// healthEvery is defaultHealthEvery but in tests. A field set at
	// construction, not a package variable: Changes' goroutine reads it
	// for as long as it runs, which may be past the end of a test.
	healthEvery time.Duration
	// unknown is told of subscriptions and dead letters of a layout this
	// version does not know (SetUnknownLayout).
	unknown layout.Unknown
}

// SetUnknownLayout sets what is told of a subscription or dead letter
// stored in a layout this version does not know, written by a newer one:
// such a record is left out of List and of the dead letters, and Get
// answers it unavailable (another instance, a newer one, reads it).
func (s *State) SetUnknownLayout(u layout.Unknown) { s.unknown = u }

// stored is a subscription's or a dead letter's JSON as kept in Redis:
// the record's fields and v, its layout (layout.WebhooksV1; a record
// without v, v0.1.0's, is layout 1 too).
func stored(rec any) ([]byte, error) {
	data, err := json.Marshal(rec)
	if err != nil || len(data) < 2 || data[0] != '{' {
		return data, err
	}
	head := `{"v":` + strconv.Itoa(layout.WebhooksV1)
	if data[1] != '}' {
		head += ","
	}
	return append([]byte(head), data[1:]...), nil
}

// errUnknownLayout is the error of a record of a layout this version does
// not know.
var errUnknownLayout = &lock.Error{Code: lock.CodeUnavailable,
	Detail: "this webhook was stored by a newer lockapi, in a layout this instance does not know: a newer instance reads it (docs/UPGRADING.md)"}

// decode reads a record that stored wrote into rec; at names it for the
// log. A layout this version does not know is told and answered
// errUnknownLayout.
func (s *State) decode(data, at string, rec any) error {
	var head struct {
		V json.RawMessage `json:"v"`
	}
	if err := json.Unmarshal([]byte(data), &head); err != nil {
		return err
	}
	if v := string(head.V); v != "" && v != strconv.Itoa(layout.WebhooksV1) {
		if !layout.Plain(v) {
			v = "?"
		}
		s.unknown.Tell(layout.Webhooks, v, at)
		return errUnknownLayout
	}
	return json.Unmarshal([]byte(data), rec)
}

var (
	_ webhook.State    = (*State)(nil)
	_ webhook.Notifier = (*State)(nil)
)

// New returns a State on rdb whose keys start with prefix + "webhooks:".
// timeout bounds each call (DefaultCallTimeout when 0).
func New(rdb goredis.UniversalClient, prefix string, timeout time.Duration) *State {
	if timeout <= 0 {
		timeout = DefaultCallTimeout
	}
	return &State{rdb: rdb, prefix: prefix + "webhooks:", timeout: timeout, healthEvery: defaultHealthEvery}
}

func (s *State) subsKey() string             { return s.prefix + "subs" }
func (s *State) dedupeKey() string           { return s.prefix + "dedupe" }
func (s *State) tag(id string) string        { return s.prefix + "{wh:" + id + "}" }
func (s *State) cursorKey(id string) string  { return s.tag(id) + ":cursor" }
func (s *State) deadKey(id string) string    { return s.tag(id) + ":dead" }
func (s *State) replaysKey(id string) string { return s.tag(id) + ":replay" }
func (s *State) channel() string             { return s.prefix + "changed" }
func (s *State) ownedKey(principal string) string {
	return s.prefix + "by-principal:" + principal
}

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

func (s *State) Create(ctx context.Context, sub webhook.Subscription, cursor string, quota int) error {
	ctx, cancel := s.call(ctx)
	defer cancel()
	data, err := stored(sub)
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
	if quota > 0 {
		if err := s.claim(ctx, sub, quota); err != nil {
			if owner, herr := s.rdb.HGet(ctx, s.dedupeKey(), key).Result(); herr == nil && owner == sub.ID {
				_ = s.rdb.HDel(ctx, s.dedupeKey(), key).Err()
			}
			return err
		}
	}
	// The cursor first: once the subscription is listed, a worker may
	// start on it, and must find where to start.
	if err := s.rdb.Set(ctx, s.cursorKey(sub.ID), cursor, 0).Err(); err != nil {
		return fail(err)
	}
	if err := s.rdb.HSet(ctx, s.subsKey(), sub.ID, data).Err(); err != nil {
		return fail(err)
	}
	s.changed(ctx, sub.ID)
	return nil
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
		err := s.decode(data, s.subsKey()+" "+id, &sub)
		if errors.Is(err, errUnknownLayout) {
			continue // told: a newer instance delivers it
		}
		if err != nil {
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
	if err := s.decode(data, s.subsKey()+" "+id, &sub); errors.Is(err, errUnknownLayout) {
		return webhook.Subscription{}, err
	} else if err != nil {
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
	// Uncounted once gone from the list; should this fail, the next
	// create past the quota finds the id gone and uncounts it.
	_ = s.rdb.SRem(ctx, s.ownedKey(sub.Principal), id).Err()
	// Gone from the list: the workers stop even if what follows fails.
	defer s.changed(ctx, id)
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
