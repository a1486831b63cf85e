package storetest

import (
	"testing"
	"time"

	"github.com/lockapi/lockapi/internal/lock"
)

// sessionWaitAnswers waits for WaitSessionChange, begun in the background,
// and returns its answer.
func sessionWaitAnswers(t *testing.T, answers <-chan sessionAnswer, what string) sessionAnswer {
	t.Helper()
	select {
	case a := <-answers:
		return a
	case <-time.After(10 * time.Second):
		t.Fatalf("the session's blocking query did not answer %s", what)
		return sessionAnswer{}
	}
}

type sessionAnswer struct {
	sess lock.Session
	err  error
	took time.Duration
}

// waitSession begins a WaitSessionChange of ref from index in the
// background.
func waitSession(s lock.Store, ss lock.Sessions, ref lock.SessionRef, index string, wait time.Duration) <-chan sessionAnswer {
	answers := make(chan sessionAnswer, 1)
	go func() {
		began := time.Now()
		sess, err := lock.WaitSessionChange(ctx, s, ss, ref, index, wait)
		answers <- sessionAnswer{sess, err, time.Since(began)}
	}()
	return answers
}

// sessionBlockingQuery: a session's blocking query answers when a bound
// lease ends (a force release) and when the session ends; a renewal does
// not change its index, and a wait with nothing changed answers the
// session as it is.
func sessionBlockingQuery(t *testing.T, b Backend) {
	s, ss := openSessions(t, b)
	sess := newSession(t, ss, lock.SessionRequest{TTL: 30 * time.Second})
	ref := lock.SessionRef{ID: sess.ID}
	for _, name := range []string{"sq:a", "sq:b"} {
		tryAcquire(t, s, lock.AcquireRequest{Lock: name, Owner: "w", Session: sess.ID})
	}
	got, err := ss.GetSession(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	index := lock.SessionIndex(got)

	renewed, err := ss.RenewSession(ctx, ref, 0)
	if err != nil {
		t.Fatal(err)
	}
	if lock.SessionIndex(renewed) != index {
		t.Fatalf("a renewal changed the session's index")
	}
	a := sessionWaitAnswers(t, waitSession(s, ss, ref, index, 50*time.Millisecond), "after its wait")
	if a.err != nil || lock.SessionIndex(a.sess) != index {
		t.Fatalf("a wait with nothing changed: %+v, %v", a.sess, a.err)
	}

	answers := waitSession(s, ss, ref, index, 20*time.Second)
	if _, err := s.ForceRelease(ctx, "sq:a", "admin"); err != nil {
		t.Fatal(err)
	}
	a = sessionWaitAnswers(t, answers, "to a force release of a bound lease")
	t.Logf("force release to answer: at most %v", a.took)
	if a.err != nil || len(a.sess.Leases) != 1 || a.sess.Leases[0].Lock != "sq:b" || lock.SessionIndex(a.sess) == index {
		t.Fatalf("answer to a force release: %+v, %v", a.sess, a.err)
	}

	answers = waitSession(s, ss, ref, lock.SessionIndex(a.sess), 20*time.Second)
	if _, err := ss.EndSession(ctx, ref); err != nil {
		t.Fatal(err)
	}
	a = sessionWaitAnswers(t, answers, "to the session's end")
	WantCode(t, a.err, lock.CodeSessionLost)

	// A session that expires publishes nothing: the wait looks again at
	// its expiry.
	short := newSession(t, ss, lock.SessionRequest{})
	tryAcquire(t, s, lock.AcquireRequest{Lock: "sq:short", Owner: "w", Session: short.ID})
	// As renewed, with its lease: GetSession may come after the expiry.
	got = expireSoon(t, ss, short, 200*time.Millisecond)
	a = sessionWaitAnswers(t, waitSession(s, ss, lock.SessionRef{ID: short.ID}, lock.SessionIndex(got), 20*time.Second), "to the session's expiry")
	WantCode(t, a.err, lock.CodeSessionLost)
	t.Logf("session expiry to answer: %v", time.Since(got.ExpiresAt))
}
