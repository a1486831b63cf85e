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
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/oklog/ulid/v2"
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

// changed tells the instances subscribed to Changes that the subscription
// id changed. The change is made: a notice that cannot be sent is made up
// for by their next periodic read, so its failure is no error.
func (s *State) changed(ctx context.Context, id string) {
	_ = s.rdb.Publish(ctx, s.channel(), id).Err()
}

// Changes subscribes to the notices that any instance's State sends on
// changes (see the package doc). While nothing changes it sends nothing
// but a PING every 5 minutes.
func (s *State) Changes(ctx context.Context) <-chan struct{} {
	out := make(chan struct{}, 1)
	notify := func() {
		select {
		case out <- struct{}{}:
		default: // one is pending already
		}
	}
	go func() {
		defer close(out)
		wait := resubscribeMin
		for ctx.Err() == nil {
			if s.listen(ctx, notify) {
				wait = resubscribeMin
			}
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
			case <-t.C:
			}
			t.Stop()
			wait = min(2*wait, resubscribeMax)
		}
	}()
	return out
}

// listen subscribes to the notices on a connection of its own and tells
// of each, and of the subscription, until ctx ends or the connection
// fails; subscribed says whether the subscription was confirmed.
func (s *State) listen(ctx context.Context, notify func()) (subscribed bool) {
	ps := s.rdb.Subscribe(ctx, s.channel())
	// A receive does not end with ctx: closing the connection ends it.
	stop := context.AfterFunc(ctx, func() { _ = ps.Close() })
	defer func() {
		stop()
		_ = ps.Close()
	}()
	pinged := false
	for {
		wait := s.healthEvery
		if pinged {
			wait = s.timeout
		}
		msg, err := ps.ReceiveTimeout(ctx, wait)
		if ctx.Err() != nil {
			return subscribed
		}
		var ne net.Error
		switch {
		case err == nil:
			switch msg.(type) {
			case *goredis.Subscription:
				// Subscribed, or subscribed again after go-redis
				// reconnected: changes may have been missed meanwhile.
				subscribed = true
				notify()
			case *goredis.Message:
				notify()
			}
			pinged = false
		case errors.As(err, &ne) && ne.Timeout() && !pinged:
			if ps.Ping(ctx) != nil {
				return subscribed
			}
			pinged = true
		default:
			// Failed, or no answer to the PING: a fresh connection.
			return subscribed
		}
	}
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
