package redis_test

import (
	"encoding/json"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/lockapi/lockapi/internal/layout"
	"github.com/lockapi/lockapi/internal/lock"
	redisstore "github.com/lockapi/lockapi/internal/store/redis"
	"github.com/lockapi/lockapi/internal/testkit/redistest"
	"github.com/lockapi/lockapi/internal/testkit/storetest"
)

// told records what a store tells of unknown layouts.
type told struct {
	mu  sync.Mutex
	got []string
}

func (k *told) unknown(kind layout.Kind, v, at string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.got = append(k.got, string(kind)+" v="+v)
}

func (k *told) said() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Clone(k.got)
}

// TestLayout_unknown_event_entries: entries of a layout this version does
// not know (a newer one's v, or neither v nor t) read as events with only
// their id and UnknownLayout, each told, between the events around them;
// entries without v (v0.1.0's fields) read as before.
func TestLayout_unknown_event_entries(t *testing.T) {
	srv := redistest.Start(t)
	prefix := newPrefix()
	var k told
	s := openEvents(t, srv, prefix, func(o *redisstore.Options) { o.UnknownLayout = k.unknown })
	g := acquire(t, s, lock.AcquireRequest{Lock: "job", Owner: "a"})
	rdb := srv.Client(t)
	for _, vals := range []map[string]any{
		{"v": "3", "x": "a later layout"},
		{"z": "no layout at all"},
		{"t": "renewed", "l": "job", "k": g.Lease.ID, "o": "a", "p": "", "m": "exclusive", "n": "1", "h": "1", "q": "0"},
		{"v": "1", "t": "renewed", "l": "job", "k": g.Lease.ID, "o": "a", "p": "", "m": "exclusive", "n": "1", "h": "1", "q": "0"},
		{"v": "9\r\nevent: injected", "e": "granted"},
	} {
		if err := rdb.XAdd(ctx, &goredis.XAddArgs{Stream: prefix + "events", Values: vals}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	release(t, s, g.Lease, true)
	evs := readAll(t, s, "")
	var got []string
	for _, e := range evs {
		if e.UnknownLayout != "" {
			got = append(got, "unknown v="+e.UnknownLayout)
			if e.Lock != "" || e.Type != "" || e.ID == "" || e.Time.IsZero() {
				t.Errorf("an unknown entry read as %+v, want only its id and time", e)
			}
			continue
		}
		got = append(got, string(e.Type)+" "+e.Lock)
	}
	want := []string{"granted job", "unknown v=3", "unknown v=?", "renewed job", "renewed job", "unknown v=?", "released job"}
	if !slices.Equal(got, want) {
		t.Errorf("events %q, want %q", got, want)
	}
	if want := []string{"events v=3", "events v=?", "events v=?"}; !slices.Equal(k.said(), want) {
		t.Errorf("told %q, want %q", k.said(), want)
	}
	// Every filter passes them, so that each reader can say so.
	if !(lock.EventFilter{Lock: "other", Types: []lock.EventType{lock.EventGranted}}).Match(evs[1]) {
		t.Error("a filter dropped an event of an unknown layout")
	}
}

// TestLayout_unknown_session: a session whose hash has a layout this
// version does not know is answered unavailable (a newer instance reads
// it), and told; one without v (v0.1.0's) reads as before.
func TestLayout_unknown_session(t *testing.T) {
	srv := redistest.Start(t)
	prefix := newPrefix()
	var k told
	s := openEvents(t, srv, prefix, func(o *redisstore.Options) { o.UnknownLayout = k.unknown })
	ss := s.Sessions()
	rdb := srv.Client(t)
	sess, err := ss.CreateSession(ctx, lock.SessionRequest{Owner: "w", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	key := prefix + "{s:" + sess.ID + "}:session"
	if v, _ := rdb.HGet(ctx, key, "v").Result(); v != layout.SessionsV1 {
		t.Fatalf("a new session's v = %q, want %q", v, layout.SessionsV1)
	}
	rdb.HDel(ctx, key, "v") // as v0.1.0 wrote it
	if _, err := ss.GetSession(ctx, lock.SessionRef{ID: sess.ID}); err != nil {
		t.Fatalf("a session without v: %v", err)
	}
	rdb.HSet(ctx, key, "v", "2")
	_, err = ss.RenewSession(ctx, lock.SessionRef{ID: sess.ID}, time.Minute)
	storetest.WantCode(t, err, lock.CodeUnavailable)
	_, err = ss.GetSession(ctx, lock.SessionRef{ID: sess.ID})
	storetest.WantCode(t, err, lock.CodeUnavailable)
	if want := []string{"sessions v=2", "sessions v=2"}; !slices.Equal(k.said(), want) {
		t.Errorf("told %q, want %q", k.said(), want)
	}
	if exp, _ := rdb.HGet(ctx, key, "exp").Result(); exp != timeMs(sess.ExpiresAt) {
		t.Errorf("the renewal of an unknown layout changed exp to %s (was %s)", exp, timeMs(sess.ExpiresAt))
	}
}

func timeMs(t time.Time) string { return strconv.FormatInt(t.UnixMilli(), 10) }

// TestLayout_unknown_lease: a lock whose lock hash, fence or shared record
// has a layout this version does not know is neither granted, renewed,
// released, forced nor shown, and stays as it was: every call is answered
// unavailable (a newer instance serves it) and told; a listing leaves it
// out. Records without v (v0.1.0's) read as layout 1.
func TestLayout_unknown_lease(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	prefix := newPrefix()
	var k told
	s := openEvents(t, srv, prefix, func(o *redisstore.Options) { o.UnknownLayout = k.unknown })
	rdb := srv.Client(t)
	lockKey, fenceKey := prefix+"{job}:lock", prefix+"{job}:fence"
	g := acquire(t, s, lock.AcquireRequest{Lock: "job", Owner: "a"})
	for _, key := range []string{lockKey, fenceKey} {
		if v, _ := rdb.HGet(ctx, key, "v").Result(); v != layout.LeasesV1 {
			t.Fatalf("%s: v = %q, want %q", key, v, layout.LeasesV1)
		}
		rdb.HDel(ctx, key, "v") // as v0.1.0 wrote them
	}
	ref := lock.LeaseRef{Lock: "job", ID: g.Lease.ID}
	if _, err := s.Renew(ctx, ref, time.Minute); err != nil {
		t.Fatalf("renew a lease without v: %v", err)
	}

	rdb.HSet(ctx, lockKey, "v", "2")
	before, _ := rdb.HGetAll(ctx, lockKey).Result()
	_, err := s.TryAcquire(ctx, lock.AcquireRequest{Lock: "job", Owner: "b", TTL: time.Minute})
	storetest.WantCode(t, err, lock.CodeUnavailable)
	_, err = s.TryAcquire(ctx, lock.AcquireRequest{Lock: "job", Owner: "b", TTL: time.Minute, Mode: lock.Shared})
	storetest.WantCode(t, err, lock.CodeUnavailable)
	_, err = s.Renew(ctx, ref, time.Minute)
	storetest.WantCode(t, err, lock.CodeUnavailable)
	_, err = s.Release(ctx, ref, true)
	storetest.WantCode(t, err, lock.CodeUnavailable)
	_, err = s.ForceRelease(ctx, "job", "admin")
	storetest.WantCode(t, err, lock.CodeUnavailable)
	_, err = s.Inspect(ctx, "job")
	storetest.WantCode(t, err, lock.CodeUnavailable)
	if page, err := s.List(ctx, lock.ListRequest{}); err != nil || len(page.Locks) != 0 {
		t.Errorf("List: %+v, %v; want the lock left out", page.Locks, err)
	}
	if after, _ := rdb.HGetAll(ctx, lockKey).Result(); !maps.Equal(before, after) {
		t.Errorf("the lock hash changed from %v to %v", before, after)
	}

	// A fence of a later layout: the free name is not granted.
	rdb.HSet(ctx, lockKey, "v", layout.LeasesV1)
	release(t, s, g.Lease, true)
	rdb.HSet(ctx, fenceKey, "v", "3")
	_, err = s.TryAcquire(ctx, lock.AcquireRequest{Lock: "job", Owner: "b", TTL: time.Minute})
	storetest.WantCode(t, err, lock.CodeUnavailable)
	if n, _ := rdb.Exists(ctx, lockKey).Result(); n != 0 {
		t.Error("an acquire on a fence of an unknown layout made a lock hash")
	}

	// A shared record of a later layout; one without v reads.
	sh := acquire(t, s, lock.AcquireRequest{Lock: "readers", Owner: "r", Mode: lock.Shared})
	shKey := prefix + "{readers}:lock:shared"
	raw, _ := rdb.HGet(ctx, shKey, sh.Lease.ID).Result()
	if !strings.Contains(raw, `"v":"1"`) {
		t.Fatalf("a shared record %s, want v 1", raw)
	}
	rdb.HSet(ctx, shKey, sh.Lease.ID, strings.Replace(raw, `"v":"1"`, `"v":2`, 1))
	_, err = s.Inspect(ctx, "readers")
	storetest.WantCode(t, err, lock.CodeUnavailable)
	_, err = s.Renew(ctx, lock.LeaseRef{Lock: "readers", ID: sh.Lease.ID}, time.Minute)
	storetest.WantCode(t, err, lock.CodeUnavailable)
	var rec map[string]any
	if err := json.Unmarshal([]byte(raw), &rec); err != nil {
		t.Fatal(err)
	}
	delete(rec, "v") // as v0.1.0 wrote it
	old, _ := json.Marshal(rec)
	rdb.HSet(ctx, shKey, sh.Lease.ID, old)
	if _, err := s.Renew(ctx, lock.LeaseRef{Lock: "readers", ID: sh.Lease.ID}, time.Minute); err != nil {
		t.Errorf("renew a shared lease without v: %v", err)
	}

	want := []string{"leases v=2", "leases v=2", "leases v=2", "leases v=2", "leases v=2", "leases v=2", "leases v=2",
		"leases v=3", "leases v=2", "leases v=2"}
	if got := k.said(); !slices.Equal(got, want) {
		t.Errorf("told %q, want %q", got, want)
	}
}
