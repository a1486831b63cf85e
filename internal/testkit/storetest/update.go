package storetest

import (
	"maps"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/lockapi/lockapi/internal/lock"
)

// updateBehaviours are those of Store.Update, a lease's new metadata
// (docs/ELECTIONS.md: a leader's proclaimed value).
var updateBehaviours = []behaviour{
	{"Update_replaces_metadata_only", updateReplacesMetadata},
	{"Update_of_each_kind", updateEachKind},
	{"Update_refused", updateRefused},
	{"Update_wakes_watchers", updateWakesWatchers},
	{"Update_is_an_event", updateIsAnEvent},
}

// update updates ref's metadata or fails the test.
func update(t *testing.T, s lock.Store, ref lock.LeaseRef, md map[string]string) lock.Lease {
	t.Helper()
	l, err := s.Update(ctx, ref, md)
	if err != nil {
		t.Fatalf("update %s of %s to %v: %v", ref.ID, ref.Lock, md, err)
	}
	return l
}

// updateReplacesMetadata: the lease's metadata is replaced as a whole, and
// its token, TTL, expiry and holds stay; the lock's index changes.
func updateReplacesMetadata(t *testing.T, b Backend) {
	b.require(t, updates)
	s := b.Open(t)
	const name = "up:a"
	l := tryAcquire(t, s, lock.AcquireRequest{Lock: name, Owner: "o", Principal: "p", TTL: time.Minute, Metadata: map[string]string{"a": "1", "b": "2"}}).Lease
	before := Inspect(t, s, name)
	got := update(t, s, lock.LeaseRef{Lock: name, ID: l.ID, Principal: "p"}, map[string]string{"c": "3"})
	if got.ID != l.ID || got.Token != l.Token || got.TTL != l.TTL || got.HoldCount != 1 || got.Owner != "o" ||
		!maps.Equal(got.Metadata, map[string]string{"c": "3"}) || !b.sameTime(got.ExpiresAt, l.ExpiresAt) {
		t.Fatalf("updated lease = %+v, was %+v", got, l)
	}
	after := Inspect(t, s, name)
	if after.Index == before.Index {
		t.Fatalf("the index stayed %q over the update", after.Index)
	}
	if h := after.Holder; h == nil || h.Token != l.Token || !maps.Equal(h.Metadata, map[string]string{"c": "3"}) || !b.sameTime(h.ExpiresAt, l.ExpiresAt) {
		t.Fatalf("holder after the update = %+v", after.Holder)
	}
	// nil and {} both remove every label.
	got = update(t, s, lock.LeaseRef{Lock: name, ID: l.ID}, nil)
	if len(got.Metadata) != 0 || len(Inspect(t, s, name).Holder.Metadata) != 0 {
		t.Fatalf("metadata after removing it = %v", got.Metadata)
	}
	// A renewal keeps it.
	update(t, s, lock.LeaseRef{Lock: name, ID: l.ID}, map[string]string{"d": "4"})
	if r, err := s.Renew(ctx, lock.LeaseRef{Lock: name, ID: l.ID}, 0); err != nil || !maps.Equal(r.Metadata, map[string]string{"d": "4"}) {
		t.Fatalf("renewal after an update = %+v, %v", r, err)
	}
}

// updateEachKind: a reentrant lease has one copy for all its holds; a
// reader's and a permit's update leaves the others' metadata alone.
func updateEachKind(t *testing.T, b Backend) {
	b.require(t, updates)
	s := b.Open(t)
	re := tryAcquire(t, s, lock.AcquireRequest{Lock: "up:re", Owner: "o"}).Lease
	tryAcquire(t, s, lock.AcquireRequest{Lock: "up:re", Owner: "o"})
	if got := update(t, s, lock.LeaseRef{Lock: "up:re", ID: re.ID}, map[string]string{"v": "1"}); got.HoldCount != 2 || got.Token != re.Token {
		t.Fatalf("reentrant lease after the update = %+v", got)
	}
	kinds := []lock.AcquireRequest{{Lock: "up:shared", Mode: lock.Shared}}
	if b.has(semaphores) {
		kinds = append(kinds, lock.AcquireRequest{Lock: "up:sem", Limit: 3})
	}
	for _, k := range kinds {
		k.Owner, k.Metadata = "a", map[string]string{"who": "a"}
		a := tryAcquire(t, s, k).Lease
		k.Owner, k.Metadata = "b", map[string]string{"who": "b"}
		tryAcquire(t, s, k)
		got := update(t, s, lock.LeaseRef{Lock: k.Lock, ID: a.ID}, map[string]string{"who": "a2"})
		if got.Mode != a.Mode || got.Limit != a.Limit || got.Token != a.Token {
			t.Fatalf("%s: updated lease = %+v, was %+v", k.Lock, got, a)
		}
		seen := map[string]string{}
		for _, h := range Inspect(t, s, k.Lock).Holders {
			seen[h.Owner] = h.Metadata["who"]
		}
		if !maps.Equal(seen, map[string]string{"a": "a2", "b": "b"}) {
			t.Fatalf("%s: holders' metadata after a's update = %v", k.Lock, seen)
		}
	}
}

// updateRefused: a lease that does not hold the lock is lost, another
// principal's is forbidden, and neither changes anything; a store without
// updates refuses them as unsupported.
func updateRefused(t *testing.T, b Backend) {
	s := b.Open(t)
	const name = "up:refused"
	l := tryAcquire(t, s, lock.AcquireRequest{Lock: name, Owner: "o", Principal: "p", Metadata: map[string]string{"v": "1"}}).Lease
	before := Inspect(t, s, name)
	md := map[string]string{"v": "2"}
	if !b.has(updates) {
		_, err := s.Update(ctx, lock.LeaseRef{Lock: name, ID: l.ID}, md)
		WantCode(t, err, lock.CodeUnsupported)
	} else {
		_, err := s.Update(ctx, lock.LeaseRef{Lock: name, ID: l.ID, Principal: "q"}, md)
		WantCode(t, err, lock.CodeForbidden)
		_, err = s.Update(ctx, lock.LeaseRef{Lock: name, ID: ulid.Make().String()}, md)
		WantCode(t, err, lock.CodeLeaseLost)
		_, err = s.Update(ctx, lock.LeaseRef{Lock: "up:free", ID: l.ID}, md)
		WantCode(t, err, lock.CodeLeaseLost)
	}
	after := Inspect(t, s, name)
	if after.Index != before.Index || after.Holder == nil || after.Holder.Metadata["v"] != "1" {
		t.Fatalf("a refused update changed the lock: %+v, holder %+v", after, after.Holder)
	}
	if !b.has(updates) {
		return
	}
	if _, err := s.Release(ctx, lock.LeaseRef{Lock: name, ID: l.ID}, true); err != nil {
		t.Fatal(err)
	}
	_, err := s.Update(ctx, lock.LeaseRef{Lock: name, ID: l.ID}, md)
	WantCode(t, err, lock.CodeLeaseLost)
}

// updateWakesWatchers: an update wakes a watcher of the lock's changes,
// as a blocking query waits on it.
func updateWakesWatchers(t *testing.T, b Backend) {
	b.require(t, updates)
	s := b.Open(t)
	const name = "up:watched"
	l := Acquire(t, s, name, "o", time.Minute)
	w, err := s.Watch(ctx, name, lock.WatchChanges)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	update(t, s, lock.LeaseRef{Lock: name, ID: l.ID}, map[string]string{"v": "2"})
	select {
	case <-w.C():
	case <-time.After(5 * time.Second):
		t.Fatal("the update woke no watcher within 5s")
	}
}

// updateIsAnEvent: an update records updated, with the new metadata ({}
// or none when it removed every label).
func updateIsAnEvent(t *testing.T, b Backend) {
	b.require(t, updates)
	s := b.Open(t)
	c := newEventCheck(t, b, s, "up:ev")
	l := tryAcquire(t, s, lock.AcquireRequest{Lock: "up:ev", Owner: "o", Principal: "p"}).Lease
	update(t, s, lock.LeaseRef{Lock: "up:ev", ID: l.ID}, map[string]string{"addr": "10.0.0.7:9000", "line": "a\nb"})
	update(t, s, lock.LeaseRef{Lock: "up:ev", ID: l.ID}, nil)
	evs := c.next()
	wantEventList(t, "update", false, evs, evOf(lock.EventGranted, l, 1), evOf(lock.EventUpdated, l, 1), evOf(lock.EventUpdated, l, 1))
	if md := evs[1].Metadata; !maps.Equal(md, map[string]string{"addr": "10.0.0.7:9000", "line": "a\nb"}) {
		t.Fatalf("the updated event's metadata = %v", md)
	}
	if md := evs[2].Metadata; len(md) != 0 {
		t.Fatalf("the second updated event's metadata = %v, want none", md)
	}
	if evs[0].Metadata != nil {
		t.Fatalf("the granted event carries metadata %v", evs[0].Metadata)
	}
}
