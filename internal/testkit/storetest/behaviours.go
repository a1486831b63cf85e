package storetest

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/lockapi/lockapi/fence"
	"github.com/lockapi/lockapi/internal/fencetoken"
	"github.com/lockapi/lockapi/internal/lock"
	"github.com/lockapi/lockapi/internal/testkit/fencetest"
)

// behaviour is one entry of the suite: a test body that opens its stores
// from the backend.
type behaviour struct {
	name string
	test func(t *testing.T, backend Backend)
}

// behaviours is the whole suite. A behaviour exists only as an entry of this
// table, which Run iterates, so none can be written and then left out of a
// backend's run. It is kept in three parts: the plain lock's behaviours here,
// those of the lock kinds (docs/LOCK_KINDS.md) in kinds.go, and those of the
// event log (docs/EVENTS.md) in events.go.
var behaviours = append(append(append(coreBehaviours, kindBehaviours...), eventBehaviours...), historyBehaviours...)

// coreBehaviours are the plain (exclusive) lock's behaviours.
var coreBehaviours = []behaviour{
	{"AcquireRelease", func(t *testing.T, backend Backend) {
		s := backend.Open(t)
		before := time.Now().Add(-time.Second)
		g, err := s.TryAcquire(ctx, lock.AcquireRequest{Lock: "job:a", Owner: "w1", TTL: 30 * time.Second, Metadata: map[string]string{"job": "nightly"}})
		if err != nil {
			t.Fatal(err)
		}
		l := g.Lease
		if !g.Fresh || l.HoldCount != 1 || l.Token == 0 || l.Owner != "w1" || l.Lock != "job:a" || l.TTL != 30*time.Second {
			t.Fatalf("grant = %+v", g)
		}
		if _, err := ulid.ParseStrict(l.ID); err != nil {
			t.Fatalf("lease id %q is not a ULID: %v", l.ID, err)
		}
		if l.AcquiredAt.Before(before) || !backend.sameTime(l.ExpiresAt, l.AcquiredAt.Add(30*time.Second)) || l.Metadata["job"] != "nightly" {
			t.Fatalf("lease times/metadata = %+v", l)
		}
		st := Inspect(t, s, "job:a")
		if !st.Held || st.Holder.Owner != "w1" || st.Holder.Token != l.Token || st.LastToken != l.Token || st.Holder.Metadata["job"] != "nightly" || !backend.sameTime(st.Holder.ExpiresAt, l.ExpiresAt) {
			t.Fatalf("state = %+v holder %+v", st, st.Holder)
		}
		res, err := s.Release(ctx, lock.LeaseRef{Lock: "job:a", ID: l.ID}, false)
		if err != nil || !res.Released || res.HoldCount != 0 {
			t.Fatalf("release = %+v, %v", res, err)
		}
		st2 := Inspect(t, s, "job:a")
		if st2.Held || st2.Holder != nil || st2.LastToken != l.Token || st2.Index == st.Index {
			t.Fatalf("state after release = %+v (index before %s)", st2, st.Index)
		}
	}},
	{"Inspect_free_lock_is_not_an_error", func(t *testing.T, backend Backend) {
		s := backend.Open(t)
		st := Inspect(t, s, "never:used")
		if st.Held || st.LastToken != 0 || st.Index == "" {
			t.Fatalf("state = %+v", st)
		}
	}},
	{"Reentrant", func(t *testing.T, backend Backend) {
		s := backend.Open(t)
		first := Acquire(t, s, "re", "w1", time.Second)
		g, err := s.TryAcquire(ctx, lock.AcquireRequest{Lock: "re", Owner: "w1", TTL: 20 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if g.Fresh || g.Lease.ID != first.ID || g.Lease.Token != first.Token || g.Lease.HoldCount != 2 || g.Lease.TTL != 20*time.Second {
			t.Fatalf("reentrant grant = %+v, first %+v", g, first)
		}
		if !g.Lease.ExpiresAt.After(first.ExpiresAt) {
			t.Fatalf("reentrant acquire did not reset the TTL: %v then %v", first.ExpiresAt, g.Lease.ExpiresAt)
		}
		res, err := s.Release(ctx, lock.LeaseRef{Lock: "re", ID: first.ID}, false)
		if err != nil || res.Released || res.HoldCount != 1 {
			t.Fatalf("first release = %+v, %v", res, err)
		}
		if st := Inspect(t, s, "re"); !st.Held || st.Holder.HoldCount != 1 {
			t.Fatalf("after one release: %+v", st)
		}
		res, err = s.Release(ctx, lock.LeaseRef{Lock: "re", ID: first.ID}, false)
		if err != nil || !res.Released {
			t.Fatalf("second release = %+v, %v", res, err)
		}
	}},
	{"Reentrancy_is_per_principal", func(t *testing.T, backend Backend) {
		s := backend.Open(t)
		if _, err := s.TryAcquire(ctx, lock.AcquireRequest{Lock: "p", Owner: "same", Principal: "team-a", TTL: time.Minute}); err != nil {
			t.Fatal(err)
		}
		_, err := s.TryAcquire(ctx, lock.AcquireRequest{Lock: "p", Owner: "same", Principal: "team-b", TTL: time.Minute})
		WantCode(t, err, lock.CodeHeld)
	}},
	{"Only_the_acquiring_principal_renews_and_releases", func(t *testing.T, backend Backend) {
		s := backend.Open(t)
		g, err := s.TryAcquire(ctx, lock.AcquireRequest{Lock: "mine", Owner: "w", Principal: "team-a", TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		before := Inspect(t, s, "mine")
		theirs := lock.LeaseRef{Lock: "mine", ID: g.Lease.ID, Principal: "team-b"}
		_, err = s.Renew(ctx, theirs, time.Hour)
		WantCode(t, err, lock.CodeForbidden)
		_, err = s.Release(ctx, theirs, true)
		WantCode(t, err, lock.CodeForbidden)
		if after := Inspect(t, s, "mine"); after.Index != before.Index {
			t.Fatal("another principal changed the lease")
		}
		if _, err := s.Renew(ctx, lock.LeaseRef{Lock: "mine", ID: g.Lease.ID, Principal: "team-a"}, time.Hour); err != nil {
			t.Fatalf("the acquiring principal's renew: %v", err)
		}
		// No principal: an admin, who may release anyone's lease.
		res, err := s.Release(ctx, lock.LeaseRef{Lock: "mine", ID: g.Lease.ID}, false)
		if err != nil || !res.Released || res.Retried {
			t.Fatalf("admin release = %+v, %v", res, err)
		}
		// A retry of that release is the acquiring principal's too.
		_, err = s.Release(ctx, theirs, false)
		WantCode(t, err, lock.CodeForbidden)
		if res, err := s.Release(ctx, lock.LeaseRef{Lock: "mine", ID: g.Lease.ID, Principal: "team-a"}, false); err != nil || !res.Retried {
			t.Fatalf("the owner's retry = %+v, %v", res, err)
		}
	}},
	{"ReleaseAll", func(t *testing.T, backend Backend) {
		s := backend.Open(t)
		l := Acquire(t, s, "all", "w", time.Minute)
		Acquire(t, s, "all", "w", time.Minute)
		Acquire(t, s, "all", "w", time.Minute)
		res, err := s.Release(ctx, lock.LeaseRef{Lock: "all", ID: l.ID}, true)
		if err != nil || !res.Released || res.HoldCount != 0 {
			t.Fatalf("release all = %+v, %v", res, err)
		}
		if Inspect(t, s, "all").Held {
			t.Fatal("still held")
		}
	}},
	{"Held_by_another", func(t *testing.T, backend Backend) {
		s := backend.Open(t)
		a := Acquire(t, s, "h", "a", 10*time.Second)
		_, err := s.TryAcquire(ctx, lock.AcquireRequest{Lock: "h", Owner: "b", TTL: time.Second})
		WantCode(t, err, lock.CodeHeld)
		var e *lock.Error
		errors.As(err, &e)
		if e.HeldBy.Owner != "a" || e.HeldBy.Token != a.Token || e.HeldBy.ExpiresIn <= 0 || e.HeldBy.ExpiresIn > 10*time.Second ||
			e.HeldBy.LeaseExpiresIn < e.HeldBy.ExpiresIn || e.HeldBy.LeaseExpiresIn > 10*time.Second {
			t.Fatalf("held by = %+v", e.HeldBy)
		}
	}},
	{"Wrong_lease_changes_nothing", func(t *testing.T, backend Backend) {
		s := backend.Open(t)
		Acquire(t, s, "w", "a", time.Minute)
		before := Inspect(t, s, "w")
		other := ulid.Make().String()
		_, err := s.Release(ctx, lock.LeaseRef{Lock: "w", ID: other}, false)
		WantCode(t, err, lock.CodeLeaseLost)
		_, err = s.Release(ctx, lock.LeaseRef{Lock: "w", ID: other}, true)
		WantCode(t, err, lock.CodeLeaseLost)
		_, err = s.Renew(ctx, lock.LeaseRef{Lock: "w", ID: other}, time.Hour)
		WantCode(t, err, lock.CodeLeaseLost)
		if after := Inspect(t, s, "w"); after.Index != before.Index || after.Holder.HoldCount != 1 || !after.Holder.ExpiresAt.Equal(before.Holder.ExpiresAt) {
			t.Fatalf("state changed: %+v -> %+v", before.Holder, after.Holder)
		}
	}},
	{"Renew", func(t *testing.T, backend Backend) {
		s := backend.Open(t)
		l := Acquire(t, s, "r", "a", time.Second)
		renewed, err := s.Renew(ctx, lock.LeaseRef{Lock: "r", ID: l.ID}, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if renewed.ID != l.ID || renewed.Token != l.Token || renewed.TTL != time.Minute || renewed.ExpiresAt.Sub(l.ExpiresAt) < 58*time.Second {
			t.Fatalf("renewed = %+v, was %+v", renewed, l)
		}
		again, err := s.Renew(ctx, lock.LeaseRef{Lock: "r", ID: l.ID}, 0)
		if err != nil || again.TTL != time.Minute {
			t.Fatalf("renew with the lease's TTL = %+v, %v", again, err)
		}
		if st := Inspect(t, s, "r"); !backend.sameTime(st.Holder.ExpiresAt, again.ExpiresAt) {
			t.Fatalf("inspect expiry %v, renew said %v", st.Holder.ExpiresAt, again.ExpiresAt)
		}
	}},
	{"Expiry_frees_and_late_holder_is_lost", func(t *testing.T, backend Backend) {
		s := backend.Open(t)
		start := time.Now() // before the grant: its TTL runs from then
		a := Acquire(t, s, "exp", "a", 200*time.Millisecond)
		g, err := lock.AcquireWait(ctx, s, lock.AcquireRequest{Lock: "exp", Owner: "b", TTL: time.Minute}, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		waited := time.Since(start)
		if waited < 150*time.Millisecond || waited > 5*time.Second {
			t.Fatalf("b was granted after %v; a's TTL was 200ms", waited)
		}
		if g.Lease.Token <= a.Token {
			t.Fatalf("token %d after %d", g.Lease.Token, a.Token)
		}
		before := Inspect(t, s, "exp")
		_, err = s.Release(ctx, lock.LeaseRef{Lock: "exp", ID: a.ID}, false)
		WantCode(t, err, lock.CodeLeaseLost)
		_, err = s.Renew(ctx, lock.LeaseRef{Lock: "exp", ID: a.ID}, time.Hour)
		WantCode(t, err, lock.CodeLeaseLost)
		after := Inspect(t, s, "exp")
		if after.Index != before.Index || after.Holder.Owner != "b" || after.Holder.Token != g.Lease.Token {
			t.Fatalf("late holder touched the new lease: %+v -> %+v", before.Holder, after.Holder)
		}
	}},
	// A holder that renews with a shorter TTL and then dies is waited out at
	// the new expiry, not the old one.
	{"Waiter_sees_a_shortened_lease", func(t *testing.T, backend Backend) {
		s := Watch(backend.Open(t))
		a := Acquire(t, s, "short", "a", 30*time.Second)
		done := make(chan time.Time, 1)
		go func() {
			if _, err := lock.AcquireWait(ctx, s, lock.AcquireRequest{Lock: "short", Owner: "b", TTL: time.Minute}, 20*time.Second); err != nil {
				t.Error(err)
			}
			done <- time.Now()
		}()
		WaitForWaiters(t, s, 1)
		time.Sleep(50 * time.Millisecond) // let b make its try and time the 30s expiry
		renewed := time.Now()
		if _, err := s.Renew(ctx, lock.LeaseRef{Lock: "short", ID: a.ID}, 100*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		select {
		case at := <-done:
			t.Logf("granted %v after the renewal to 100ms", at.Sub(renewed))
		case <-time.After(10 * time.Second):
			t.Fatal("the waiter slept on the lease's old expiry")
		}
	}},
	{"Release_retry_is_idempotent", func(t *testing.T, backend Backend) {
		s := backend.Open(t)
		a := Acquire(t, s, "idem", "a", time.Minute)
		for i := 0; i < 2; i++ {
			res, err := s.Release(ctx, lock.LeaseRef{Lock: "idem", ID: a.ID}, false)
			if err != nil || !res.Released || res.HoldCount != 0 || res.Retried != (i == 1) {
				t.Fatalf("release #%d = %+v, %v", i+1, res, err)
			}
		}
		b := Acquire(t, s, "idem", "b", time.Minute)
		before := Inspect(t, s, "idem")
		if res, err := s.Release(ctx, lock.LeaseRef{Lock: "idem", ID: a.ID}, true); err != nil || !res.Released {
			t.Fatalf("retry after a new grant = %+v, %v", res, err)
		}
		after := Inspect(t, s, "idem")
		if after.Index != before.Index || after.Holder.Token != b.Token {
			t.Fatal("a retried release touched the newer holder")
		}
	}},
	{"ForceRelease", func(t *testing.T, backend Backend) {
		s := Watch(backend.Open(t))
		a := Acquire(t, s, "force", "a", time.Minute)
		got := make(chan lock.Grant, 1)
		go func() {
			g, err := lock.AcquireWait(ctx, s, lock.AcquireRequest{Lock: "force", Owner: "b", TTL: time.Minute}, 20*time.Second)
			if err != nil {
				t.Error(err)
			}
			got <- g
		}()
		WaitForWaiters(t, s, 1)
		freed, err := s.ForceRelease(ctx, "force", "admin")
		if err != nil || !freed {
			t.Fatalf("force release = %v, %v", freed, err)
		}
		var g lock.Grant
		select {
		case g = <-got:
		case <-time.After(10 * time.Second):
			t.Fatal("the waiter did not wake after a force release")
		}
		if g.Lease.Token <= a.Token {
			t.Fatalf("token %d after force release of %d", g.Lease.Token, a.Token)
		}
		_, err = s.Release(ctx, lock.LeaseRef{Lock: "force", ID: a.ID}, false)
		WantCode(t, err, lock.CodeLeaseLost)
		if _, err := s.Release(ctx, lock.LeaseRef{Lock: "force", ID: g.Lease.ID}, false); err != nil {
			t.Fatal(err)
		}
		if freed, err := s.ForceRelease(ctx, "force", "admin"); err != nil || freed {
			t.Fatalf("force release of a free lock = %v, %v", freed, err)
		}
	}},
	{"List_prefix_and_cursor", func(t *testing.T, backend Backend) {
		s := backend.Open(t)
		want := map[string]bool{}
		for i := 0; i < 23; i++ {
			name := fmt.Sprintf("list:a:%02d", i)
			l := Acquire(t, s, name, "w", time.Minute)
			if i%5 == 0 {
				if _, err := s.Release(ctx, lock.LeaseRef{Lock: name, ID: l.ID}, false); err != nil {
					t.Fatal(err)
				}
				continue
			}
			want[name] = true
		}
		Acquire(t, s, "list:b:0", "w", time.Minute)
		Acquire(t, s, "other", "w", time.Minute)

		seen := map[string]bool{}
		cursor := ""
		// A store may end a page on a work budget (short, or empty with a
		// cursor) on a Redis that the other behaviours filled: the bound
		// is only there to end a listing that never does.
		for pages := 0; ; pages++ {
			if pages > 100_000 {
				t.Fatal("listing does not end")
			}
			page, err := s.List(ctx, lock.ListRequest{Prefix: "list:a:", Limit: 5, Cursor: cursor})
			if err != nil {
				t.Fatal(err)
			}
			for _, st := range page.Locks {
				if !strings.HasPrefix(st.Lock, "list:a:") || !st.Held || st.Holder.Owner != "w" {
					t.Fatalf("listed %+v", st)
				}
				seen[st.Lock] = true
			}
			if page.NextCursor == "" {
				break
			}
			cursor = page.NextCursor
			// The HTTP layer drops the names an API key's patterns do not
			// cover from a page, so a page may end on a name its caller
			// must not learn: a cursor must not tell which name it
			// resumes after.
			for _, text := range readings(cursor) {
				if strings.Contains(text, "list:") {
					t.Fatalf("cursor %q reads as %q", cursor, text)
				}
			}
		}
		if fmt.Sprint(sortedKeys(seen)) != fmt.Sprint(sortedKeys(want)) {
			t.Fatalf("listed %v\nwant %v", sortedKeys(seen), sortedKeys(want))
		}
		_, err := s.List(ctx, lock.ListRequest{Cursor: "not a cursor"})
		WantCode(t, err, lock.CodeInvalid)
	}},
	{"List_passes_over_names_not_visible", func(t *testing.T, backend Backend) {
		s := backend.Open(t)
		hidden := func(name string) bool { return !strings.HasPrefix(name, "vis:hidden") }
		for i := range 3 {
			Acquire(t, s, fmt.Sprintf("vis:hidden:%d", i), "w", time.Minute)
		}
		// Names that are not visible are passed over as names the prefix
		// does not match: no page of the listing shows them. (A store
		// may end a page on a work budget, with a cursor, whether the
		// names it walked were hidden or not matched: docs/SECURITY.md.)
		for _, prefix := range []string{"vis:hidden", "vis:none"} {
			if got := listAll(t, s, lock.ListRequest{Prefix: prefix, Limit: 1, Visible: hidden}); len(got) != 0 {
				t.Fatalf("prefix %s listed %+v", prefix, got)
			}
		}
		Acquire(t, s, "vis:shown:1", "w", time.Minute)
		Acquire(t, s, "vis:shown:2", "w", time.Minute)
		seen := map[string]bool{}
		for _, st := range listAll(t, s, lock.ListRequest{Prefix: "vis:", Limit: 2, Visible: hidden}) {
			seen[st.Lock] = true
		}
		if fmt.Sprint(sortedKeys(seen)) != "[vis:shown:1 vis:shown:2]" {
			t.Fatalf("listed %v", sortedKeys(seen))
		}
	}},
	{"Tokens_strictly_increase", func(t *testing.T, backend Backend) {
		s := backend.Open(t)
		var last uint64
		for i := 0; i < 1000; i++ {
			l := Acquire(t, s, "tokens", "w", time.Minute)
			if l.Token <= last || l.Token > fencetoken.MaxToken {
				t.Fatalf("grant %d: token %d after %d", i, l.Token, last)
			}
			last = l.Token
			if _, err := s.Release(ctx, lock.LeaseRef{Lock: "tokens", ID: l.ID}, false); err != nil {
				t.Fatal(err)
			}
		}
	}},
	{"Tokens_survive_data_loss", func(t *testing.T, backend Backend) {
		if len(backend.LoseData) == 0 {
			t.Log("the backend names no way to lose its data")
		}
		for how, lose := range backend.LoseData {
			t.Run(how, func(t *testing.T) {
				s := backend.Open(t)
				checkTokensSurvive(t, s, func() lock.Store { return lose(t, s) })
			})
		}
	}},
	{"Seed_waiter_is_woken_by_release", func(t *testing.T, backend Backend) {
		s := Watch(backend.Open(t))
		a := Acquire(t, s, "handoff", "a", 5*time.Minute)
		type result struct {
			g   lock.Grant
			err error
			at  time.Time
		}
		done := make(chan result, 1)
		go func() {
			g, err := lock.AcquireWait(ctx, s, lock.AcquireRequest{Lock: "handoff", Owner: "b", TTL: time.Minute}, 10*time.Second)
			done <- result{g, err, time.Now()}
		}()
		WaitForWaiters(t, s, 1)
		released := time.Now()
		if _, err := s.Release(ctx, lock.LeaseRef{Lock: "handoff", ID: a.ID}, false); err != nil {
			t.Fatal(err)
		}
		r := <-done
		if r.err != nil {
			t.Fatal(r.err)
		}
		handoff := r.at.Sub(released)
		t.Logf("release-to-grant: %v", handoff)
		// A's TTL is five minutes: a grant within seconds came from the
		// release notification.
		if handoff > 3*time.Second || r.g.Lease.Token <= a.Token {
			t.Fatalf("b granted after %v with token %d (a had %d)", handoff, r.g.Lease.Token, a.Token)
		}
	}},
	{"Seed_two_waiters_one_at_a_time", func(t *testing.T, backend Backend) {
		s := Watch(backend.Open(t))
		a := Acquire(t, s, "two", "a", 5*time.Minute)
		grants := make(chan lock.Lease, 2)
		for _, owner := range []string{"b", "c"} {
			go func() {
				g, err := lock.AcquireWait(ctx, s, lock.AcquireRequest{Lock: "two", Owner: owner, TTL: time.Minute}, 20*time.Second)
				if err != nil {
					t.Error(err)
					return
				}
				grants <- g.Lease
			}()
		}
		WaitForWaiters(t, s, 2)
		if _, err := s.Release(ctx, lock.LeaseRef{Lock: "two", ID: a.ID}, false); err != nil {
			t.Fatal(err)
		}
		first := <-grants
		select {
		case second := <-grants:
			t.Fatalf("both waiters hold the lock: %s and %s", first.Owner, second.Owner)
		case <-time.After(200 * time.Millisecond):
		}
		if _, err := s.Release(ctx, lock.LeaseRef{Lock: "two", ID: first.ID}, false); err != nil {
			t.Fatal(err)
		}
		select {
		case second := <-grants:
			if second.Owner == first.Owner || second.Token <= first.Token {
				t.Fatalf("second grant %+v after %+v", second, first)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the second waiter was not woken by the first one's release")
		}
	}},
	{"Seed_wait_timeout", func(t *testing.T, backend Backend) {
		s := backend.Open(t)
		Acquire(t, s, "timeout", "a", time.Minute)
		start := time.Now()
		_, err := lock.AcquireWait(ctx, s, lock.AcquireRequest{Lock: "timeout", Owner: "b", TTL: time.Minute}, time.Second)
		took := time.Since(start)
		WantCode(t, err, lock.CodeHeld)
		if took < 900*time.Millisecond || took > 3*time.Second {
			t.Fatalf("a 1s wait gave up after %v", took)
		}
	}},
	{"Seed_wait_cancelled", func(t *testing.T, backend Backend) {
		s := Watch(backend.Open(t))
		a := Acquire(t, s, "cancel", "a", time.Minute)
		cctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			_, err := lock.AcquireWait(cctx, s, lock.AcquireRequest{Lock: "cancel", Owner: "b", TTL: time.Minute}, 30*time.Second)
			done <- err
		}()
		WaitForWaiters(t, s, 1)
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled wait returned %v", err)
		}
		WaitForWaiters(t, s, 0)
		if _, err := s.Release(ctx, lock.LeaseRef{Lock: "cancel", ID: a.ID}, false); err != nil {
			t.Fatal(err)
		}
		if st := Inspect(t, s, "cancel"); st.Held {
			t.Fatalf("a departed waiter holds the lock: %+v", st.Holder)
		}
	}},
	{"Seed_concurrent_acquirers_one_wins", func(t *testing.T, backend Backend) {
		s := backend.Open(t)
		var wins, held atomic.Int64
		var wg sync.WaitGroup
		start := make(chan struct{})
		// 300 at once shows the acquire is atomic; 1000 only queued them
		// for the client's pool past the store's deadline on a loaded
		// machine, which is overload, not a race.
		const acquirers = 300
		for i := 0; i < acquirers; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				_, err := s.TryAcquire(ctx, lock.AcquireRequest{Lock: "race", Owner: fmt.Sprint("w", i), TTL: time.Minute})
				switch lock.ErrorCode(err) {
				case "":
					wins.Add(1)
				case lock.CodeHeld:
					held.Add(1)
				default:
					t.Error(err)
				}
			}()
		}
		close(start)
		wg.Wait()
		if wins.Load() != 1 || held.Load() != acquirers-1 {
			t.Fatalf("%d won, %d refused", wins.Load(), held.Load())
		}
	}},
	{"Seed_sequential_cycles_on_distinct_names", func(t *testing.T, backend Backend) {
		s := backend.Open(t)
		start := time.Now()
		// Throughput is cmd/lockbench's to measure (docs/PERFORMANCE.md);
		// this checks that many cycles in a row each grant and free.
		const n = 1000
		for i := 0; i < n; i++ {
			name := fmt.Sprint("seq:", i)
			g, err := s.TryAcquire(ctx, lock.AcquireRequest{Lock: name, Owner: "w", TTL: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			if res, err := s.Release(ctx, lock.LeaseRef{Lock: name, ID: g.Lease.ID}, false); err != nil || !res.Released {
				t.Fatalf("release %s = %+v, %v", name, res, err)
			}
		}
		t.Logf("%d lock/unlock cycles in %v (%.0f/s, with -race if enabled)", n, time.Since(start), n/time.Since(start).Seconds())
	}},
	// A holder that stalls past its TTL finds its late write refused by a
	// fenced resource, because the next holder's token is larger.
	{"Kleppmann", func(t *testing.T, backend Backend) {
		s := backend.Open(t)
		var res fencetest.Resource
		a := Acquire(t, s, "storage", "a", 100*time.Millisecond)
		// A stalls (a GC pause) past its TTL; B waits for the lock and gets
		// it when A's lease expires.
		g, err := lock.AcquireWait(ctx, s, lock.AcquireRequest{Lock: "storage", Owner: "b", TTL: time.Minute}, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		b := g.Lease
		if b.Token <= a.Token {
			t.Fatalf("t2 = %d is not larger than t1 = %d", b.Token, a.Token)
		}
		if err := res.Write(b.Token, "from b"); err != nil {
			t.Fatal(err)
		}
		// A wakes up and writes with its old token.
		if err := res.Write(a.Token, "from a"); !errors.Is(err, fence.ErrStale) {
			t.Fatalf("late write with t1 = %v, want ErrStale", err)
		}
		if w := res.Writes(); len(w) != 1 || w[0].Value != "from b" {
			t.Fatalf("resource holds %+v", w)
		}
	}},
	// An idempotent retry returns the lease as it is: same lease, token and hold
	// count, nothing added; the store marks it as a replay.
	{"Idempotency_key_replays_the_grant", func(t *testing.T, backend Backend) {
		s := backend.Open(t)
		req := lock.AcquireRequest{Lock: "idem", Owner: "w", IdempotencyKey: "k-1"}
		first := tryAcquire(t, s, req)
		if !first.Fresh || first.Replayed || first.RequestID != first.Lease.ID {
			t.Fatalf("first grant = %+v", first)
		}
		again := tryAcquire(t, s, req)
		if !again.Replayed || !again.Fresh || again.Lease.ID != first.Lease.ID || again.Lease.Token != first.Lease.Token || again.Lease.HoldCount != 1 {
			t.Fatalf("replay = %+v, first %+v", again, first)
		}
		if n := holds(t, s, "idem"); n != 1 {
			t.Fatalf("hold count after a replay = %d, want 1", n)
		}
		// A new key is a new (reentrant) acquire.
		other := tryAcquire(t, s, lock.AcquireRequest{Lock: "idem", Owner: "w", IdempotencyKey: "k-2"})
		if other.Replayed || other.Fresh || other.Lease.HoldCount != 2 {
			t.Fatalf("acquire with another key = %+v", other)
		}
		// The key is the owner's: another owner is refused as for any held lock.
		_, err := s.TryAcquire(ctx, lock.AcquireRequest{Lock: "idem", Owner: "x", IdempotencyKey: "k-2", TTL: time.Minute})
		WantCode(t, err, lock.CodeHeld)
		// After the lease ends the key means nothing: a fresh grant.
		if _, err := s.Release(ctx, lock.LeaseRef{Lock: "idem", ID: first.Lease.ID}, true); err != nil {
			t.Fatal(err)
		}
		fresh := tryAcquire(t, s, lock.AcquireRequest{Lock: "idem", Owner: "w", IdempotencyKey: "k-2"})
		if fresh.Replayed || !fresh.Fresh || fresh.Lease.Token <= first.Lease.Token {
			t.Fatalf("after release = %+v", fresh)
		}
	}},
	// Abandon undoes exactly the hold of the acquire it names, once, and leaves
	// alone an answer that a replay claimed.
	{"Abandon", func(t *testing.T, backend Backend) {
		s := backend.Open(t)
		t.Run("fresh", func(t *testing.T) {
			g := tryAcquire(t, s, lock.AcquireRequest{Lock: "ab1", Owner: "w"})
			abandon(t, s, "ab1", g.RequestID)
			if n := holds(t, s, "ab1"); n != 0 {
				t.Fatalf("abandoned fresh grant left %d holds", n)
			}
			abandon(t, s, "ab1", g.RequestID) // again: nothing to do
			next := tryAcquire(t, s, lock.AcquireRequest{Lock: "ab1", Owner: "other"})
			abandon(t, s, "ab1", g.RequestID)
			if st := Inspect(t, s, "ab1"); !st.Held || st.Holder.Owner != "other" || st.Holder.Token != next.Lease.Token {
				t.Fatalf("an old abandon touched the next holder: %+v", st)
			}
		})
		t.Run("fresh_then_retried_by_the_owner", func(t *testing.T) {
			// The ghost: the grant's answer was lost, the client
			// retried with the same owner and got hold 2, and releases once.
			ghost := tryAcquire(t, s, lock.AcquireRequest{Lock: "ab2", Owner: "w"})
			retry := tryAcquire(t, s, lock.AcquireRequest{Lock: "ab2", Owner: "w"})
			if retry.Lease.HoldCount != 2 {
				t.Fatalf("retry = %+v", retry)
			}
			abandon(t, s, "ab2", ghost.RequestID)
			abandon(t, s, "ab2", ghost.RequestID)
			if n := holds(t, s, "ab2"); n != 1 {
				t.Fatalf("holds after abandoning the ghost (twice) = %d, want 1", n)
			}
			if res, err := s.Release(ctx, lock.LeaseRef{Lock: "ab2", ID: retry.Lease.ID}, false); err != nil || !res.Released {
				t.Fatalf("the client's one release = %+v, %v", res, err)
			}
		})
		t.Run("reentrant", func(t *testing.T) {
			tryAcquire(t, s, lock.AcquireRequest{Lock: "ab3", Owner: "w"})
			second := tryAcquire(t, s, lock.AcquireRequest{Lock: "ab3", Owner: "w"})
			if second.RequestID == second.Lease.ID {
				t.Fatalf("a reentrant acquire has the lease's request id")
			}
			abandon(t, s, "ab3", second.RequestID)
			if n := holds(t, s, "ab3"); n != 1 {
				t.Fatalf("holds = %d, want 1", n)
			}
		})
		t.Run("claimed_by_a_replay", func(t *testing.T) {
			req := lock.AcquireRequest{Lock: "ab4", Owner: "w", IdempotencyKey: "k"}
			g := tryAcquire(t, s, req)
			if r := tryAcquire(t, s, req); !r.Replayed {
				t.Fatalf("not a replay: %+v", r)
			}
			abandon(t, s, "ab4", g.RequestID)
			if n := holds(t, s, "ab4"); n != 1 {
				t.Fatalf("abandon undid a grant a replay had claimed: holds = %d", n)
			}
		})
		t.Run("replay_after_abandon_acquires_again", func(t *testing.T) {
			req := lock.AcquireRequest{Lock: "ab5", Owner: "w", IdempotencyKey: "k"}
			tryAcquire(t, s, lock.AcquireRequest{Lock: "ab5", Owner: "w"})
			g := tryAcquire(t, s, req)
			abandon(t, s, "ab5", g.RequestID)
			r := tryAcquire(t, s, req)
			if r.Replayed || r.Lease.HoldCount != 2 {
				t.Fatalf("a retry after the abandon must add its hold again: %+v", r)
			}
		})
		t.Run("unknown_request", func(t *testing.T) {
			g := tryAcquire(t, s, lock.AcquireRequest{Lock: "ab6", Owner: "w"})
			abandon(t, s, "ab6", "01J00000000000000000000000")
			abandon(t, s, "never-held", g.RequestID)
			if n := holds(t, s, "ab6"); n != 1 {
				t.Fatalf("holds = %d", n)
			}
		})
	}},
	// Abandon undoes the hold its own acquire added, whatever the owner did
	// since: a later re-entry of the same lease does not hide it (issue 25),
	// in either reentrant mode. It never undoes a hold twice, one a replay
	// claimed, or one of a lease that has ended since.
	{"Abandon_undoes_its_hold_after_later_reentries", func(t *testing.T, backend Backend) {
		s := backend.Open(t)
		for _, mode := range []lock.Mode{lock.Exclusive, lock.Shared} {
			t.Run(string(mode), func(t *testing.T) {
				name := "ab:later:" + string(mode)
				req := lock.AcquireRequest{Lock: name, Owner: "w", Mode: mode}
				fresh := tryAcquire(t, s, req)
				holdsNow := func() int {
					t.Helper()
					st := Inspect(t, s, name)
					if !st.Held {
						return 0
					}
					return holderOf(t, st, fresh.Lease.Token).HoldCount
				}
				r1 := tryAcquire(t, s, req)
				r2 := tryAcquire(t, s, req)
				if n := holdsNow(); n != 3 || r1.Fresh || r2.Fresh {
					t.Fatalf("holds after two re-entries = %d (%+v, %+v), want 3", n, r1, r2)
				}
				abandon(t, s, name, r1.RequestID)
				if n := holdsNow(); n != 2 {
					t.Fatalf("holds after abandoning the earlier re-entry = %d, want 2", n)
				}
				abandon(t, s, name, r1.RequestID)
				if n := holdsNow(); n != 2 {
					t.Fatalf("holds after abandoning it again = %d, want 2", n)
				}
				// A replay claims its answer: an abandon of it, after a
				// later re-entry, leaves its hold alone.
				keyed := req
				keyed.IdempotencyKey = "k"
				claimed := tryAcquire(t, s, keyed)
				if r := tryAcquire(t, s, keyed); !r.Replayed {
					t.Fatalf("not a replay of %s: %+v", claimed.RequestID, r)
				}
				tryAcquire(t, s, req)
				abandon(t, s, name, claimed.RequestID)
				if n := holdsNow(); n != 4 {
					t.Fatalf("holds after abandoning a claimed re-entry = %d, want 4", n)
				}
				// Each hold goes once: the two re-entries left, then the
				// fresh grant's, which ends the lease.
				abandon(t, s, name, r2.RequestID)
				release(t, s, name, fresh.Lease.ID, false)
				release(t, s, name, fresh.Lease.ID, false)
				abandon(t, s, name, fresh.RequestID)
				if n := holdsNow(); n != 0 {
					t.Fatalf("holds after abandoning the fresh grant last = %d, want 0", n)
				}
				// A re-entry of an ended lease added nothing to the next one.
				next := tryAcquire(t, s, req)
				again := tryAcquire(t, s, req)
				if _, err := s.Release(ctx, lock.LeaseRef{Lock: name, ID: next.Lease.ID}, true); err != nil {
					t.Fatal(err)
				}
				last := tryAcquire(t, s, req)
				abandon(t, s, name, again.RequestID)
				if st := Inspect(t, s, name); !st.Held || holderOf(t, st, last.Lease.Token).HoldCount != 1 {
					t.Fatalf("an abandon of an ended lease's re-entry touched the next: %+v", st)
				}
			})
		}
	}},
	// A refused multi-lock gives back exactly the holds it took, while the
	// same owner re-enters one of its names at the same time (issue 25):
	// afterwards the owner holds as many holds as it was granted, and
	// releasing each of them frees the lock.
	{"Refused_multi_locks_give_back_exactly_their_holds", func(t *testing.T, backend Backend) {
		s := backend.Open(t)
		for _, mode := range []lock.Mode{lock.Exclusive, lock.Shared} {
			t.Run(string(mode), func(t *testing.T) {
				a, b := "ml:"+string(mode)+":a", "ml:"+string(mode)+":b"
				mine := lock.AcquireRequest{Lock: a, Owner: "alice", Mode: mode, TTL: time.Minute}
				first := tryAcquire(t, s, mine)
				Acquire(t, s, b, "bob", time.Minute)
				const rounds = 50
				var wg sync.WaitGroup
				var granted atomic.Int64
				errs := make(chan error, 2*rounds)
				for range rounds {
					wg.Add(2)
					go func() {
						defer wg.Done()
						both := []lock.AcquireRequest{mine, {Lock: b, Owner: "alice", TTL: time.Minute}}
						if _, err := lock.AcquireAll(ctx, s, both, 0); lock.ErrorCode(err) != lock.CodeHeld {
							errs <- fmt.Errorf("multi-lock of %s and %s: %v, want held", a, b, err)
						}
					}()
					go func() {
						defer wg.Done()
						g, err := s.TryAcquire(ctx, mine)
						switch {
						case err != nil:
							errs <- fmt.Errorf("re-entry: %v", err)
						case g.Fresh || g.Lease.ID != first.Lease.ID:
							errs <- fmt.Errorf("re-entry granted %+v, want a hold of %s", g, first.Lease.ID)
						default:
							granted.Add(1)
						}
					}()
				}
				wg.Wait()
				close(errs)
				for err := range errs {
					t.Error(err)
				}
				want := 1 + int(granted.Load())
				if h := holderOf(t, Inspect(t, s, a), first.Lease.Token); h.HoldCount != want {
					t.Fatalf("%s's holds = %d, want the %d granted", a, h.HoldCount, want)
				}
				for i := range want {
					res := release(t, s, a, first.Lease.ID, false)
					if res.Released != (i == want-1) {
						t.Fatalf("release %d of %d = %+v", i+1, want, res)
					}
				}
				if st := Inspect(t, s, a); st.Held {
					t.Fatalf("%s is still held after every granted hold was released: %+v", a, st)
				}
			})
		}
	}},
}

// readings returns the ways a cursor might be read: as it is, and decoded
// as base64 or hex where it decodes.
func readings(cursor string) []string {
	out := []string{cursor}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(cursor); err == nil {
			out = append(out, string(b))
		}
	}
	if b, err := hex.DecodeString(cursor); err == nil {
		out = append(out, string(b))
	}
	return out
}

// listAll pages through s's listing of req to its end and returns every
// lock it listed: a page may be short, or empty with a cursor, where a
// store ends a page on a work budget.
func listAll(t *testing.T, s lock.Store, req lock.ListRequest) []lock.State {
	t.Helper()
	var all []lock.State
	for pages := 0; ; pages++ {
		if pages > 100_000 {
			t.Fatal("listing does not end")
		}
		page, err := s.List(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, page.Locks...)
		if page.NextCursor == "" {
			return all
		}
		req.Cursor = page.NextCursor
	}
}
