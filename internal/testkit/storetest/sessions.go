package storetest

import (
	"slices"
	"testing"
	"time"

	"github.com/lockapi/lockapi/internal/lock"
)

// sessionBehaviours are the behaviours of sessions and lock-delay
// (docs/SESSIONS.md). A store that declares no sessions (Backend.Sessions
// false, and its Sessions() nil) skips them; Refused_kinds checks that it
// refuses an acquire that names a session, and changes nothing.
var sessionBehaviours = []behaviour{
	{"Session_binds_every_kind", sessionBindsEveryKind},
	{"Session_renewal_keeps_every_lease", sessionRenewalKeepsAll},
	{"Session_expiry_ends_every_lease_within_a_second", sessionExpiryEndsAll},
	{"Session_end_releases_every_lease_at_once", sessionEndReleasesAll},
	{"Lock_delay_after_expiry", lockDelayAfterExpiry},
	{"Lock_delay_after_force_release", lockDelayAfterForceRelease},
	{"No_lock_delay_after_a_clean_release", noLockDelayAfterCleanRelease},
	{"Waiter_is_granted_when_the_lock_delay_ends", waiterGrantedAfterLockDelay},
	{"Lock_delay_is_shown_and_listed_until_it_ends", lockDelayIsShown},
	{"Session_of_another_principal_is_not_found", sessionOfAnotherPrincipal},
	{"Acquire_with_an_unknown_or_ended_session_changes_nothing", acquireWithBadSession},
	{"Session_quota_counts_each_principals_live_sessions", sessionQuota},
	{"Session_blocking_query_answers_a_lost_lease_and_the_end", sessionBlockingQuery},
}

// openSessions opens a store of b and its sessions, skipping the test on a
// store that declares none.
func openSessions(t *testing.T, b Backend) (lock.Store, lock.Sessions) {
	t.Helper()
	b.require(t, sessions)
	s := b.Open(t)
	return s, s.Sessions()
}

// checkSessions fails the test unless s keeps sessions exactly when the
// backend declares them, so that a declaration that drifts from the store
// cannot skip the session behaviours unseen.
func checkSessions(t *testing.T, b Backend) {
	s := b.Open(t)
	if has := s.Sessions() != nil; has != b.Sessions {
		t.Fatalf("%T: Backend.Sessions = %v, but its Sessions() is %v", s, b.Sessions, s.Sessions())
	}
}

// expireSoon renews sess with ttl once what a test sets up on it is in
// place, and returns it as renewed: its ExpiresAt is when it ends. A
// session created with a TTL that short may end before the setup's store
// calls on a loaded machine (an acquire on Cluster took over 200 ms).
func expireSoon(t *testing.T, ss lock.Sessions, sess lock.Session, ttl time.Duration) lock.Session {
	t.Helper()
	renewed, err := ss.RenewSession(ctx, lock.SessionRef{ID: sess.ID}, ttl)
	if err != nil {
		t.Fatalf("renew session %s with TTL %v: %v", sess.ID, ttl, err)
	}
	return renewed
}

func newSession(t *testing.T, ss lock.Sessions, req lock.SessionRequest) lock.Session {
	t.Helper()
	if req.Owner == "" {
		req.Owner = "worker"
	}
	if req.TTL == 0 {
		req.TTL = time.Minute
	}
	sess, err := ss.CreateSession(ctx, req)
	if err != nil {
		t.Fatalf("create session %+v: %v", req, err)
	}
	return sess
}

func sessionBindsEveryKind(t *testing.T, b Backend) {
	s, ss := openSessions(t, b)
	sess := newSession(t, ss, lock.SessionRequest{})
	bound := func(req lock.AcquireRequest) lock.AcquireRequest {
		req.Owner, req.Session, req.TTL = "w", sess.ID, 0
		return req
	}
	var leases []lock.Lease
	excl := tryAcquire(t, s, bound(lock.AcquireRequest{Lock: "sb:excl"}))
	again := tryAcquire(t, s, bound(lock.AcquireRequest{Lock: "sb:excl"}))
	if again.Fresh || again.Lease.ID != excl.Lease.ID || again.Lease.HoldCount != 2 {
		t.Fatalf("a bound exclusive lease is not reentrant: %+v then %+v", excl, again)
	}
	leases = append(leases, excl.Lease)
	leases = append(leases, tryAcquire(t, s, bound(lock.AcquireRequest{Lock: "sb:shared", Mode: lock.Shared})).Lease)
	leases = append(leases, tryAcquire(t, s, bound(lock.AcquireRequest{Lock: "sb:sem", Limit: 2})).Lease)
	fair, err := lock.AcquireWait(ctx, s, bound(lock.AcquireRequest{Lock: "sb:fair", Fair: true}), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	leases = append(leases, fair.Lease)
	multi, err := lock.AcquireAll(ctx, s, []lock.AcquireRequest{bound(lock.AcquireRequest{Lock: "sb:m1"}), bound(lock.AcquireRequest{Lock: "sb:m2"})}, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range multi {
		leases = append(leases, g.Lease)
	}

	for _, l := range leases {
		if l.Session != sess.ID || !b.sameTime(l.ExpiresAt, sess.ExpiresAt) || l.TTL != sess.TTL {
			t.Fatalf("lease %+v is not bound to session %+v", l, sess)
		}
		st := Inspect(t, s, l.Lock)
		if !st.Held || st.Holders[0].Session != sess.ID {
			t.Fatalf("%s's state does not show the session: %+v", l.Lock, st)
		}
	}
	got, err := ss.GetSession(ctx, lock.SessionRef{ID: sess.ID})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, l := range got.Leases {
		names = append(names, l.Lock)
	}
	want := []string{"sb:excl", "sb:fair", "sb:m1", "sb:m2", "sb:sem", "sb:shared"}
	if !slices.Equal(names, want) {
		t.Fatalf("session leases = %v, want %v", names, want)
	}

	// The lease bound to the session is another holder to the same owner
	// acquiring without it.
	_, err = s.TryAcquire(ctx, lock.AcquireRequest{Lock: "sb:excl", Owner: "w", TTL: time.Minute})
	WantCode(t, err, lock.CodeHeld)
	// A bound lease is released as any lease.
	if _, err := s.Release(ctx, lock.LeaseRef{Lock: "sb:shared", ID: leases[1].ID}, false); err != nil {
		t.Fatal(err)
	}
	if got, _ := ss.GetSession(ctx, lock.SessionRef{ID: sess.ID}); len(got.Leases) != len(want)-1 {
		t.Fatalf("after one release the session has %d leases, want %d", len(got.Leases), len(want)-1)
	}
}

func sessionRenewalKeepsAll(t *testing.T, b Backend) {
	s, ss := openSessions(t, b)
	// A TTL ten renewal periods long: a loaded machine (a renewal late by
	// 300 ms was seen at load 13) must not end the session.
	sess := newSession(t, ss, lock.SessionRequest{TTL: time.Second})
	names := []string{"sr:a", "sr:b", "sr:c"}
	for _, n := range names {
		tryAcquire(t, s, lock.AcquireRequest{Lock: n, Owner: "w", Session: sess.ID})
	}
	// Renewed every 100 ms for one and a half TTLs, the leases never lapse.
	end := time.Now().Add(1500 * time.Millisecond)
	var renewed lock.Session
	for time.Now().Before(end) {
		var err error
		if renewed, err = ss.RenewSession(ctx, lock.SessionRef{ID: sess.ID}, 0); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, n := range names {
		st := Inspect(t, s, n)
		if !st.Held || st.Holders[0].ExpiresAt.Before(sess.ExpiresAt) || !b.sameTime(st.Holders[0].ExpiresAt, renewed.ExpiresAt) {
			t.Fatalf("%s after renewals: %+v, session %+v", n, st, renewed)
		}
	}
	// A renewal with a new TTL sets it on the session and its leases.
	renewed, err := ss.RenewSession(ctx, lock.SessionRef{ID: sess.ID}, time.Minute)
	if err != nil || renewed.TTL != time.Minute || len(renewed.Leases) != len(names) {
		t.Fatalf("renew with a TTL = %+v, %v", renewed, err)
	}
}

func sessionExpiryEndsAll(t *testing.T, b Backend) {
	s, ss := openSessions(t, b)
	after := lastEventID(t, s)
	sess := newSession(t, ss, lock.SessionRequest{})
	names := []string{"se:a", "se:b", "se:c", "se:d"}
	tokens := map[string]uint64{}
	for _, n := range names {
		tokens[n] = tryAcquire(t, s, lock.AcquireRequest{Lock: n, Owner: "w", Session: sess.ID}).Lease.Token
	}
	sess = expireSoon(t, ss, sess, 300*time.Millisecond)
	// The waiter's outcome comes back on a channel, never through t: a
	// test that fails first ends (and closes the store) while it waits.
	type outcome struct {
		g   lock.Grant
		err error
	}
	waited := make(chan outcome, 1)
	go func() {
		g, err := lock.AcquireWait(ctx, s, lock.AcquireRequest{Lock: "se:a", Owner: "next", TTL: time.Minute}, 10*time.Second)
		waited <- outcome{g, err}
	}()

	if log := s.Events(); log != nil {
		// Nobody touches the locks: the store ends them on its own, and
		// records each expiry, naming the session, within 1 s of the TTL.
		expired := map[string]lock.Event{}
		deadline := time.Now().Add(10 * time.Second)
		for len(expired) < len(names) && time.Now().Before(deadline) {
			evs, err := log.ReadEvents(ctx, after, 100)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range evs {
				after = e.ID
				if e.Type == lock.EventExpired && e.Session == sess.ID {
					expired[e.Lock] = e
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
		for _, n := range names {
			e, ok := expired[n]
			if !ok {
				t.Fatalf("no expired event of %s naming the session; got %v", n, expired)
			}
			if late := e.Time.Sub(sess.ExpiresAt); late > time.Second+b.ClockSlack {
				t.Fatalf("%s expired %v after its session's TTL", n, late)
			}
		}
	}
	w := <-waited
	if w.err != nil {
		t.Fatalf("the waiter for se:a: %v", w.err)
	}
	if w.g.Lease.Token <= tokens["se:a"] {
		t.Fatalf("the waiter's token %d is not above the bound lease's %d", w.g.Lease.Token, tokens["se:a"])
	}
	for _, n := range names[1:] {
		if st := Inspect(t, s, n); st.Held {
			t.Fatalf("%s is held after its session expired: %+v", n, st)
		}
	}
	_, err := ss.RenewSession(ctx, lock.SessionRef{ID: sess.ID}, 0)
	WantCode(t, err, lock.CodeSessionLost)
	_, err = ss.GetSession(ctx, lock.SessionRef{ID: sess.ID})
	WantCode(t, err, lock.CodeSessionLost)
}

// lastEventID is where a reader of only the events to come starts; "" on a
// store without events.
func lastEventID(t *testing.T, s lock.Store) string {
	t.Helper()
	log := s.Events()
	if log == nil {
		return ""
	}
	id, err := log.LastEventID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func sessionEndReleasesAll(t *testing.T, b Backend) {
	s, ss := openSessions(t, b)
	sess := newSession(t, ss, lock.SessionRequest{LockDelay: 10 * time.Second})
	names := []string{"sd:a", "sd:b", "sd:c"}
	for _, n := range names {
		tryAcquire(t, s, lock.AcquireRequest{Lock: n, Owner: "w", Session: sess.ID})
	}
	ended, err := ss.EndSession(ctx, lock.SessionRef{ID: sess.ID})
	if err != nil || len(ended.Leases) != len(names) {
		t.Fatalf("end session = %+v, %v", ended, err)
	}
	for _, n := range names {
		if st := Inspect(t, s, n); st.Held {
			t.Fatalf("%s is held after its session ended: %+v", n, st)
		}
		// A clean end: no lock-delay.
		tryAcquire(t, s, lock.AcquireRequest{Lock: n, Owner: "next"})
	}
	_, err = ss.GetSession(ctx, lock.SessionRef{ID: sess.ID})
	WantCode(t, err, lock.CodeSessionLost)
	_, err = ss.EndSession(ctx, lock.SessionRef{ID: sess.ID})
	WantCode(t, err, lock.CodeSessionLost)
	_, err = s.TryAcquire(ctx, lock.AcquireRequest{Lock: "sd:late", Owner: "w", Session: sess.ID})
	WantCode(t, err, lock.CodeSessionLost)
}

// wantLockDelay checks that an acquire of name is refused for a lock-delay
// of at most most, and returns what is left of it.
func wantLockDelay(t *testing.T, s lock.Store, name string, most time.Duration) time.Duration {
	t.Helper()
	_, err := s.TryAcquire(ctx, lock.AcquireRequest{Lock: name, Owner: "next", TTL: time.Minute})
	WantCode(t, err, lock.CodeLockDelay)
	left := lock.AsError(err).RetryIn
	if left <= 0 || left > most {
		t.Fatalf("lock-delay left = %v, want (0, %v]", left, most)
	}
	return left
}

func lockDelayAfterExpiry(t *testing.T, b Backend) {
	s, ss := openSessions(t, b)
	const delay = 2 * time.Second
	sess := newSession(t, ss, lock.SessionRequest{LockDelay: delay})
	tryAcquire(t, s, lock.AcquireRequest{Lock: "ld:exp", Owner: "w", Session: sess.ID})
	sess = expireSoon(t, ss, sess, 200*time.Millisecond)
	time.Sleep(time.Until(sess.ExpiresAt) + 50*time.Millisecond)
	left := wantLockDelay(t, s, "ld:exp", delay)
	time.Sleep(left + 50*time.Millisecond)
	tryAcquire(t, s, lock.AcquireRequest{Lock: "ld:exp", Owner: "next"})
}

func lockDelayAfterForceRelease(t *testing.T, b Backend) {
	s, ss := openSessions(t, b)
	const delay = 2 * time.Second
	sess := newSession(t, ss, lock.SessionRequest{LockDelay: delay})
	tryAcquire(t, s, lock.AcquireRequest{Lock: "ld:force", Owner: "w", Session: sess.ID})
	if held, err := s.ForceRelease(ctx, "ld:force", "admin"); err != nil || !held {
		t.Fatalf("force release = %v, %v", held, err)
	}
	wantLockDelay(t, s, "ld:force", delay)
	// The session lives on without the lease.
	if got, err := ss.GetSession(ctx, lock.SessionRef{ID: sess.ID}); err != nil || len(got.Leases) != 0 {
		t.Fatalf("session after the force release = %+v, %v", got, err)
	}
}

func noLockDelayAfterCleanRelease(t *testing.T, b Backend) {
	s, ss := openSessions(t, b)
	sess := newSession(t, ss, lock.SessionRequest{LockDelay: 10 * time.Second})
	l := tryAcquire(t, s, lock.AcquireRequest{Lock: "ld:clean", Owner: "w", Session: sess.ID}).Lease
	if _, err := s.Release(ctx, lock.LeaseRef{Lock: "ld:clean", ID: l.ID}, false); err != nil {
		t.Fatal(err)
	}
	tryAcquire(t, s, lock.AcquireRequest{Lock: "ld:clean", Owner: "next"})
}

func waiterGrantedAfterLockDelay(t *testing.T, b Backend) {
	s, ss := openSessions(t, b)
	const delay = time.Second
	sess := newSession(t, ss, lock.SessionRequest{LockDelay: delay})
	tryAcquire(t, s, lock.AcquireRequest{Lock: "ld:wait", Owner: "w", Session: sess.ID})
	forced := time.Now()
	if _, err := s.ForceRelease(ctx, "ld:wait", "admin"); err != nil {
		t.Fatal(err)
	}
	g, err := lock.AcquireWait(ctx, s, lock.AcquireRequest{Lock: "ld:wait", Owner: "next", TTL: time.Minute}, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if g.Lease.AcquiredAt.Before(forced.Add(delay - b.ClockSlack - 50*time.Millisecond)) {
		t.Fatalf("the waiter was granted at %v, before the lock-delay ended (%v)", g.Lease.AcquiredAt, forced.Add(delay))
	}
}

// lockDelayIsShown: a name closed for a lock-delay is free, shows what is
// left of the delay, and is listed, whether the delay came from a force
// release or from a session's expiry (which the store may not have acted
// on yet); its end changes the index without any write, so that a blocking
// query wakes, and the name is then open and no longer listed.
func lockDelayIsShown(t *testing.T, b Backend) {
	s, ss := openSessions(t, b)
	const delay = time.Second
	short := newSession(t, ss, lock.SessionRequest{LockDelay: delay})
	tryAcquire(t, s, lock.AcquireRequest{Lock: "ldv:exp", Owner: "w", Session: short.ID})
	tryAcquire(t, s, lock.AcquireRequest{Lock: "ldv:shared", Owner: "w", Mode: lock.Shared, Session: short.ID})
	long := newSession(t, ss, lock.SessionRequest{LockDelay: time.Minute})
	tryAcquire(t, s, lock.AcquireRequest{Lock: "ldv:force", Owner: "w", Session: long.ID})
	tryAcquire(t, s, lock.AcquireRequest{Lock: "ldv:held", Owner: "w", TTL: time.Minute})
	if _, err := s.ForceRelease(ctx, "ldv:force", "admin"); err != nil {
		t.Fatal(err)
	}
	short = expireSoon(t, ss, short, 200*time.Millisecond)
	time.Sleep(time.Until(short.ExpiresAt) + b.ClockSlack + 50*time.Millisecond)

	most := map[string]time.Duration{"ldv:exp": delay, "ldv:shared": delay, "ldv:force": time.Minute, "ldv:held": 0}
	check := func(st lock.State) {
		t.Helper()
		closed := most[st.Lock] > 0
		if st.Held == closed || (st.LockDelay > 0) != closed || st.LockDelay > most[st.Lock] {
			t.Fatalf("%s = held %v, lock-delay %v; want held %v, a lock-delay in (0, %v]", st.Lock, st.Held, st.LockDelay, !closed, most[st.Lock])
		}
	}
	for name := range most {
		check(Inspect(t, s, name))
	}
	listed := map[string]bool{}
	for _, st := range listAll(t, s, lock.ListRequest{Prefix: "ldv:", Limit: 100}) {
		check(st)
		listed[st.Lock] = true
	}
	if len(listed) != len(most) {
		t.Fatalf("listed %v, want every one of %v", sortedKeys(listed), most)
	}
	wantLockDelay(t, s, "ldv:exp", delay)

	// The delay's end wakes a blocking query on the state's index.
	st := Inspect(t, s, "ldv:exp")
	for deadline := short.ExpiresAt.Add(delay + b.ClockSlack + 5*time.Second); st.LockDelay > 0; {
		got, err := lock.WaitChange(ctx, s, "ldv:exp", st.Index, time.Until(deadline))
		if err != nil {
			t.Fatal(err)
		}
		if got.Index == st.Index {
			t.Fatalf("no change of ldv:exp's index in time; still %+v", got)
		}
		st = got
	}
	if st.Held {
		t.Fatalf("ldv:exp after its lock-delay = %+v", st)
	}
	for _, st := range listAll(t, s, lock.ListRequest{Prefix: "ldv:e", Limit: 100}) {
		t.Fatalf("ldv:exp is listed after its lock-delay: %+v", st)
	}
	tryAcquire(t, s, lock.AcquireRequest{Lock: "ldv:exp", Owner: "next"})
}

func sessionOfAnotherPrincipal(t *testing.T, b Backend) {
	s, ss := openSessions(t, b)
	sess := newSession(t, ss, lock.SessionRequest{Principal: "alice"})
	bob := lock.SessionRef{ID: sess.ID, Principal: "bob"}
	_, err := ss.GetSession(ctx, bob)
	WantCode(t, err, lock.CodeSessionNotFound)
	_, err = ss.RenewSession(ctx, bob, 0)
	WantCode(t, err, lock.CodeSessionNotFound)
	_, err = ss.EndSession(ctx, bob)
	WantCode(t, err, lock.CodeSessionNotFound)
	_, err = s.TryAcquire(ctx, lock.AcquireRequest{Lock: "sp", Owner: "w", Principal: "bob", Session: sess.ID})
	WantCode(t, err, lock.CodeSessionNotFound)
	if st := Inspect(t, s, "sp"); st.Held || st.LastToken != 0 {
		t.Fatalf("a refused acquire changed the lock: %+v", st)
	}
	list, err := ss.ListSessions(ctx, lock.SessionFilter{Principal: "bob"})
	if err != nil || len(list) != 0 {
		t.Fatalf("bob's sessions = %+v, %v", list, err)
	}
	// The owner, and an admin (no principal), find it.
	if _, err := ss.GetSession(ctx, lock.SessionRef{ID: sess.ID, Principal: "alice"}); err != nil {
		t.Fatal(err)
	}
	list, err = ss.ListSessions(ctx, lock.SessionFilter{OwnerPrefix: "work"})
	if err != nil || len(list) != 1 || list[0].ID != sess.ID {
		t.Fatalf("every session with owner prefix work = %+v, %v", list, err)
	}
	// Visible is applied before Limit: a hidden session takes no place.
	bobs := newSession(t, ss, lock.SessionRequest{Principal: "bob"})
	isBob := func(s lock.Session) bool { return s.Principal == "bob" }
	list, err = ss.ListSessions(ctx, lock.SessionFilter{Visible: isBob, Limit: 1})
	if err != nil || len(list) != 1 || list[0].ID != bobs.ID {
		t.Fatalf("the sessions Visible accepts, one of them = %+v, %v", list, err)
	}
}

func acquireWithBadSession(t *testing.T, b Backend) {
	s, ss := openSessions(t, b)
	_, err := s.TryAcquire(ctx, lock.AcquireRequest{Lock: "bad", Owner: "w", Session: "01HZZZZZZZZZZZZZZZZZZZZZZZ"})
	WantCode(t, err, lock.CodeSessionNotFound)
	sess := newSession(t, ss, lock.SessionRequest{TTL: 100 * time.Millisecond})
	time.Sleep(time.Until(sess.ExpiresAt) + 20*time.Millisecond)
	_, err = s.TryAcquire(ctx, lock.AcquireRequest{Lock: "bad", Owner: "w", Session: sess.ID})
	WantCode(t, err, lock.CodeSessionLost)
	if st := Inspect(t, s, "bad"); st.Held || st.LastToken != 0 {
		t.Fatalf("refused acquires changed the lock: %+v", st)
	}
}

// sessionQuota: past SessionRequest.Quota live sessions of one principal a
// create is refused and changes nothing; another principal is not
// affected, and a session that ends (deleted, or expired) frees its place.
func sessionQuota(t *testing.T, b Backend) {
	_, ss := openSessions(t, b)
	alice := lock.SessionRequest{Principal: "alice", Quota: 3}
	short := newSession(t, ss, lock.SessionRequest{Principal: "alice", Quota: 3, TTL: lock.MinSessionTTL})
	first := newSession(t, ss, alice)
	newSession(t, ss, alice)
	_, err := ss.CreateSession(ctx, lock.SessionRequest{Owner: "w", Principal: "alice", TTL: time.Minute, Quota: 3})
	WantCode(t, err, lock.CodeQuotaExceeded)
	list, err := ss.ListSessions(ctx, lock.SessionFilter{Principal: "alice"})
	if err != nil || len(list) > 3 {
		t.Fatalf("alice's sessions after a refusal = %d, %v", len(list), err)
	}
	// A renewal keeps its place, another principal has its own count.
	if _, err := ss.RenewSession(ctx, lock.SessionRef{ID: first.ID}, 0); err != nil {
		t.Fatal(err)
	}
	newSession(t, ss, lock.SessionRequest{Principal: "bob", Quota: 1})
	_, err = ss.CreateSession(ctx, lock.SessionRequest{Owner: "w", Principal: "bob", TTL: time.Minute, Quota: 1})
	WantCode(t, err, lock.CodeQuotaExceeded)
	// A deleted session frees its place at once.
	if _, err := ss.EndSession(ctx, lock.SessionRef{ID: first.ID}); err != nil {
		t.Fatal(err)
	}
	newSession(t, ss, alice)
	// An expired one frees it soon after its expiry (a store may keep
	// counting it a moment longer, for clocks that differ).
	deadline := short.ExpiresAt.Add(5 * time.Second)
	for {
		_, err := ss.CreateSession(ctx, lock.SessionRequest{Owner: "w", Principal: "alice", TTL: time.Minute, Quota: 3})
		if err == nil {
			break
		}
		WantCode(t, err, lock.CodeQuotaExceeded)
		if time.Now().After(deadline) {
			t.Fatal("an expired session still counts 5 s after its expiry")
		}
		time.Sleep(50 * time.Millisecond)
	}
	_, err = ss.CreateSession(ctx, lock.SessionRequest{Owner: "w", Principal: "alice", TTL: time.Minute, Quota: 3})
	WantCode(t, err, lock.CodeQuotaExceeded)
}
