package linearize

import (
	"testing"

	"github.com/anishathalye/porcupine"
)

// Hand-made histories of session-bound leases (docs/SESSIONS.md): one
// group "g" over the names x and y.

func bound(lock, owner, session string) Input {
	return Input{Kind: Acquire, Lock: lock, Owner: owner, Session: session, Group: "g"}
}

func plain(lock, owner string) Input {
	return Input{Kind: Acquire, Lock: lock, Owner: owner, Group: "g"}
}

func sess(kind Kind, session string) Input {
	return Input{Kind: kind, Session: session, Group: "g"}
}

var (
	ok200       = Output{Status: 200}
	sessionLost = Output{Status: 410, Problem: "session-lost"}
)

func TestModel_sessions(t *testing.T) {
	for _, c := range []struct {
		name string
		ops  []op
		ok   bool
	}{
		{"a delete releases every bound lease at once", []op{
			{0, 5, bound("x", "a", "s1"), granted("X1", 5, 1)},
			{10, 15, bound("y", "a", "s1"), granted("Y1", 6, 1)},
			{20, 25, plain("x", "b"), held("a", 5)},
			{30, 100, sess(SessionEnd, "s1"), ok200},
			{40, 50, plain("y", "b"), granted("Y2", 7, 1)}, // the delete came first
			{60, 70, plain("x", "b"), granted("X2", 8, 1)},
			{110, 115, sess(SessionRenew, "s1"), sessionLost},
			{120, 125, Input{Kind: Release, Lock: "x", LeaseID: "X1", Group: "g"}, lost},
		}, true},
		{"ErrDeleteNotAtOnePoint", []op{
			{0, 5, bound("x", "a", "s1"), granted("X1", 5, 1)},
			{10, 15, bound("y", "a", "s1"), granted("Y1", 6, 1)},
			{30, 100, sess(SessionEnd, "s1"), ok200},
			{40, 50, plain("y", "b"), granted("Y2", 7, 1)}, // y was released ...
			{60, 70, plain("x", "b"), held("a", 5)},        // ... and x not yet
		}, false},
		{"ErrRenewedAfterDelete", []op{
			{0, 5, bound("x", "a", "s1"), granted("X1", 5, 1)},
			{10, 15, sess(SessionEnd, "s1"), ok200},
			{20, 25, sess(SessionRenew, "s1"), ok200},
		}, false},
		{"ErrBoundAcquireOfEndedSession", []op{
			{10, 15, sess(SessionEnd, "s1"), ok200},
			{20, 25, bound("x", "a", "s1"), granted("X1", 5, 1)},
		}, false},
		{"ErrSessionLostWhileItLives", []op{
			{0, 5, bound("x", "a", "s1"), granted("X1", 5, 1)},
			{10, 15, bound("y", "a", "s1"), sessionLost},
		}, false},
		{"an expiry lies anywhere from the TTL's end to the 410", []op{
			{0, 5, bound("x", "a", "s1"), granted("X1", 5, 1)},
			{10, 15, bound("y", "a", "s1"), granted("Y1", 6, 1)},
			{20, 25, plain("x", "b"), held("a", 5)},
			{100, 200, sess(SessionExpire, "s1"), Output{}},
			{110, 120, plain("y", "b"), held("a", 6)}, // not yet expired
			{150, 160, plain("x", "b"), granted("X2", 7, 1)},
			{170, 180, plain("y", "b"), granted("Y2", 8, 1)},
			{190, 200, sess(SessionRenew, "s1"), sessionLost},
			{210, 215, bound("x", "a", "s1"), sessionLost},
		}, true},
		{"ErrExpiredBeforeItsTTL", []op{
			{0, 5, bound("x", "a", "s1"), granted("X1", 5, 1)},
			{50, 60, plain("x", "b"), granted("X2", 7, 1)},
			{100, 200, sess(SessionExpire, "s1"), Output{}},
		}, false},
		{"ErrExpiryNotAtOnePoint", []op{
			{0, 5, bound("x", "a", "s1"), granted("X1", 5, 1)},
			{10, 15, bound("y", "a", "s1"), granted("Y1", 6, 1)},
			{100, 200, sess(SessionExpire, "s1"), Output{}},
			{110, 120, plain("x", "b"), granted("X2", 7, 1)},
			{130, 140, plain("y", "b"), held("a", 6)},
		}, false},
		{"reentrancy keys on the session", []op{
			{0, 5, bound("x", "a", "s1"), granted("X1", 5, 1)},
			{10, 15, bound("x", "a", "s1"), reentered("X1", 5, 2)},
			{20, 25, plain("x", "a"), held("a", 5)},
			{30, 35, bound("x", "a", "s2"), held("a", 5)},
		}, true},
		{"ErrReadLiveAfterDelete", []op{
			{0, 5, bound("x", "a", "s1"), granted("X1", 5, 1)},
			{10, 15, sess(SessionEnd, "s1"), ok200},
			{20, 25, sess(SessionGet, "s1"), ok200},
		}, false},
		{"a renewal of a live session changes nothing", []op{
			{0, 5, bound("x", "a", "s1"), granted("X1", 5, 1)},
			{10, 15, sess(SessionRenew, "s1"), ok200},
			{20, 25, plain("x", "b"), held("a", 5)},
		}, true},
		{"an unanswered delete may have taken effect", []op{
			{0, 5, bound("x", "a", "s1"), granted("X1", 5, 1)},
			{10, 0, sess(SessionEnd, "s1"), unknown},
			{20, 25, plain("x", "b"), granted("X2", 6, 1)},
			{30, 35, sess(SessionRenew, "s1"), sessionLost},
		}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			res := Check(Strict, history(c.ops), 0)
			if got := res.Result == porcupine.Ok; got != c.ok {
				t.Fatalf("linearizable = %v (%s), want %v; visualization: %s", got, res.Result, c.ok, res.Visualization)
			}
		})
	}
}
