package linearize

import (
	"testing"

	"github.com/anishathalye/porcupine"
)

// op is one operation of a hand-made history, from call to ret.
type op struct {
	call, ret int64
	in        Input
	out       Output
}

// seq lays ops out one after another.
func seq(ops ...op) []op {
	for i := range ops {
		ops[i].call, ops[i].ret = int64(10*i), int64(10*i+5)
	}
	return ops
}

func history(ops []op) []porcupine.Operation {
	var h []porcupine.Operation
	for i, o := range ops {
		ret := o.ret
		if o.out.Unknown {
			ret = Infinity
		}
		h = append(h, porcupine.Operation{ClientId: i, Input: o.in, Call: o.call, Output: o.out, Return: ret})
	}
	return h
}

func acq(owner string) Input { return Input{Kind: Acquire, Lock: "x", Owner: owner} }

func acquire(owner string, out Output) op {
	return op{in: Input{Kind: Acquire, Lock: "x", Owner: owner}, out: out}
}

func shared(owner string, out Output) op {
	return op{in: Input{Kind: Acquire, Lock: "x", Owner: owner, Shared: true}, out: out}
}

func permit(owner string, limit int, out Output) op {
	return op{in: Input{Kind: Acquire, Lock: "x", Owner: owner, Limit: limit}, out: out}
}

func release(id string, all bool, out Output) op {
	return op{in: Input{Kind: Release, Lock: "x", LeaseID: id, All: all}, out: out}
}

func granted(id string, token uint64, holds int) Output {
	return Output{Status: 201, LeaseID: id, Token: token, HoldCount: holds}
}

func reentered(id string, token uint64, holds int) Output {
	return Output{Status: 200, LeaseID: id, Token: token, HoldCount: holds}
}

func held(owner string, token uint64) Output {
	return Output{Status: 409, Problem: "lock-held", HolderOwner: owner, HolderToken: token}
}

func released(holds int, ended bool) Output {
	return Output{Status: 200, HoldCount: holds, Released: ended}
}

// abandonedAcq is an acquire that lockapi answered 5xx, tagged so that its
// abandon names it.
func abandonedAcq(owner, tag string) Input {
	return Input{Kind: Acquire, Lock: "x", Owner: owner, Tag: tag}
}

var (
	abandoned = Output{Unknown: true, Abandoned: true}
	refused   = func(typ string) Output { return Output{Status: 409, Problem: typ} }
	lost      = Output{Status: 410, Problem: "lease-lost"}
	unknown   = Output{Unknown: true}
)

// relaxed is a promise that checks neither hold counts nor holder tokens
// exactly: what redlock's answers may need.
var relaxed = Promise{}

func TestModel(t *testing.T) {
	for _, c := range []struct {
		name    string
		promise Promise
		ops     []op
		ok      bool
	}{
		{"reentrant lock", Strict, seq(
			acquire("a", granted("L1", 5, 1)),
			acquire("a", reentered("L1", 5, 2)),
			acquire("b", held("a", 5)),
			release("L1", false, released(1, false)),
			release("L1", false, released(0, true)),
			release("L1", false, released(0, true)), // a retried release is answered again
			acquire("b", granted("L2", 6, 1)),
			release("L2", true, released(0, true)),
			release("L1", false, lost), // no longer the latest released
		), true},
		{"release all drops every hold", Strict, seq(
			acquire("a", granted("L1", 5, 1)),
			acquire("a", reentered("L1", 5, 2)),
			acquire("a", reentered("L1", 5, 3)),
			release("L1", true, released(0, true)),
			acquire("b", granted("L2", 6, 1)),
		), true},
		{"ErrDuplicateHoldCount", Strict, seq(
			acquire("a", granted("L1", 5, 1)),
			acquire("a", reentered("L1", 5, 2)),
			acquire("a", reentered("L1", 5, 2)),
		), false},
		{"duplicate hold count under a relaxed promise", relaxed, seq(
			acquire("a", granted("L1", 5, 1)),
			acquire("a", reentered("L1", 5, 2)),
			acquire("a", reentered("L1", 5, 2)),
			release("L1", false, released(2, false)),
			release("L1", false, released(1, false)),
			release("L1", false, released(0, true)),
		), true},
		{"ErrReleaseEndsLeaseTooSoon", relaxed, seq(
			acquire("a", granted("L1", 5, 1)),
			acquire("a", reentered("L1", 5, 2)),
			release("L1", false, released(0, true)),
		), false},
		{"ErrHolderToken", Strict, seq(
			acquire("a", granted("L1", 5, 1)),
			acquire("b", held("a", 4)),
		), false},
		{"holder token under a relaxed promise", relaxed, seq(
			acquire("a", granted("L1", 5, 1)),
			acquire("b", held("a", 4)),
		), true},
		{"ErrHolderOwner", relaxed, seq(
			acquire("a", granted("L1", 5, 1)),
			acquire("b", held("c", 5)),
		), false},
		{"ErrTokenNotIncreasing", Strict, seq(
			acquire("a", granted("L1", 5, 1)),
			release("L1", false, released(0, true)),
			acquire("b", granted("L2", 5, 1)),
		), false},
		{"ErrReleaseOfUnknownLease", Strict, seq(
			acquire("a", granted("L1", 5, 1)),
			release("L9", false, released(0, true)),
		), false},
		{"ErrTwoHolders", Strict, []op{
			{0, 10, acq("a"), granted("L1", 5, 1)},
			{0, 10, acq("b"), granted("L2", 6, 1)},
		}, false},
		{"concurrent acquires: one wins", Strict, []op{
			{0, 10, acq("a"), held("b", 6)},
			{0, 10, acq("b"), granted("L2", 6, 1)},
		}, true},
		{"readers share, a writer waits", Strict, seq(
			shared("r1", granted("S1", 5, 1)),
			shared("r2", granted("S2", 6, 1)),
			shared("r1", reentered("S1", 5, 2)),
			acquire("w", held("r1", 5)),
			acquire("r1", refused("upgrade-refused")),
			release("S1", true, released(0, true)),
			release("S2", false, released(0, true)),
			acquire("w", granted("W", 7, 1)),
			shared("r1", held("w", 7)),
			shared("w", granted("S3", 8, 1)), // a downgrade
		), true},
		{"ErrWriterBesideReader", Strict, seq(
			shared("r1", granted("S1", 5, 1)),
			acquire("w", granted("W", 6, 1)),
		), false},
		{"semaphore", Strict, seq(
			permit("a", 2, granted("P1", 5, 1)),
			permit("a", 2, granted("P2", 6, 1)), // permits are not reentrant
			permit("b", 2, held("a", 5)),
			permit("b", 3, refused("limit-mismatch")),
			acquire("b", refused("limit-mismatch")),
			release("P1", false, released(0, true)),
			permit("b", 2, granted("P3", 7, 1)),
		), true},
		{"ErrPermitOverLimit", Strict, seq(
			permit("a", 2, granted("P1", 5, 1)),
			permit("b", 2, granted("P2", 6, 1)),
			permit("c", 2, granted("P3", 7, 1)),
		), false},
		{"fair waiters in arrival order", Strict, seq(
			acquire("h", granted("L1", 5, 1)),
			op{in: Input{Kind: Join, Lock: "x", Owner: "w1", Tag: "q1"}},
			op{in: Input{Kind: Join, Lock: "x", Owner: "w2", Tag: "q2"}},
			acquire("other", held("h", 5)),
			release("L1", false, released(0, true)),
			acquire("other", held("", 0)), // only the queue is in the way
			op{in: Input{Kind: Acquire, Lock: "x", Owner: "w1", Fair: true, Tag: "q1"}, out: granted("L2", 6, 1)},
			release("L2", false, released(0, true)),
			op{in: Input{Kind: Acquire, Lock: "x", Owner: "w2", Fair: true, Tag: "q2"}, out: granted("L3", 7, 1)},
		), true},
		{"ErrFairOutOfOrder", Strict, seq(
			acquire("h", granted("L1", 5, 1)),
			op{in: Input{Kind: Join, Lock: "x", Owner: "w1", Tag: "q1"}},
			op{in: Input{Kind: Join, Lock: "x", Owner: "w2", Tag: "q2"}},
			release("L1", false, released(0, true)),
			op{in: Input{Kind: Acquire, Lock: "x", Owner: "w2", Fair: true, Tag: "q2"}, out: granted("L2", 6, 1)},
		), false},
		{"a refused multi-lock gives back its hold", Strict, seq(
			acquire("m", granted("L1", 5, 1)),
			op{in: Input{Kind: Take, Lock: "x", Owner: "m", Tag: "r1"}},
			op{in: Input{Kind: GiveBack, Lock: "x", Tag: "r1"}},
			release("L1", false, released(0, true)),
		), true},
		{"ErrRefusedMultiLeaksHold", Strict, seq(
			acquire("m", granted("L1", 5, 1)),
			op{in: Input{Kind: Take, Lock: "x", Owner: "m", Tag: "r1"}},
			op{in: Input{Kind: GiveBack, Lock: "x", Tag: "r1"}},
			release("L1", false, released(1, false)),
		), false},
		{"a refused multi-lock's hold is seen while it lasts", Strict, []op{
			{0, 100, Input{Kind: Take, Lock: "x", Owner: "m", Tag: "r1"}, Output{}},
			{0, 100, Input{Kind: GiveBack, Lock: "x", Tag: "r1"}, Output{}},
			{10, 20, acq("b"), held("m", 9)},
			{30, 40, acq("b"), held("m", 9)},
			{110, 120, acq("b"), granted("L2", 10, 1)},
		}, true},
		{"ErrTokenBelowUnseenHolder", Strict, []op{
			{0, 100, Input{Kind: Take, Lock: "x", Owner: "m", Tag: "r1"}, Output{}},
			{0, 100, Input{Kind: GiveBack, Lock: "x", Tag: "r1"}, Output{}},
			{10, 20, acq("b"), held("m", 9)},
			{110, 120, acq("b"), granted("L2", 8, 1)},
		}, false},
		{"an unanswered acquire may have taken effect", Strict, seq(
			acquire("a", unknown),
			acquire("b", held("a", 7)),
			acquire("a", reentered("L1", 7, 2)),
			release("L1", false, released(1, false)),
			release("L1", false, released(0, true)),
			acquire("b", granted("L2", 8, 1)),
		), true},
		{"an unanswered acquire may have had no effect", Strict, seq(
			acquire("a", unknown),
			acquire("b", granted("L2", 8, 1)),
		), true},
		{"ErrUnansweredAcquireTokenOrder", Strict, seq(
			acquire("a", unknown),
			acquire("b", held("a", 7)),
			acquire("a", reentered("L1", 7, 2)),
			release("L1", true, released(0, true)),
			acquire("b", granted("L2", 6, 1)),
		), false},
		{"an abandoned acquire's grant is seen, then undone", Strict, []op{
			{0, 0, abandonedAcq("a", "g1"), abandoned},
			{10, 20, acq("b"), held("a", 7)},
			{30, 40, acq("b"), granted("L2", 8, 1)},
		}, true},
		{"ErrGrantEndsWithoutUndo", Strict, []op{
			{0, 0, abandonedAcq("a", "g1"), unknown},
			{10, 20, acq("b"), held("a", 7)},
			{30, 40, acq("b"), granted("L2", 8, 1)},
		}, false},
		{"an abandoned reentrant acquire's hold is dropped, the lease lives", Strict, []op{
			{0, 5, acq("a"), granted("L1", 5, 1)},
			{10, 0, abandonedAcq("a", "g1"), abandoned},
			{20, 25, acq("a"), reentered("L1", 5, 3)}, // the abandoned hold is still there
			{30, 35, release("L1", false, unknown).in, released(1, false)},
			{40, 45, release("L1", false, unknown).in, released(0, true)}, // and now it is not
		}, true},
		{"ErrAbandonDropsTheLease", Strict, []op{
			{0, 5, acq("a"), granted("L1", 5, 1)},
			{6, 9, acq("a"), reentered("L1", 5, 2)},
			{10, 0, abandonedAcq("a", "g1"), abandoned},
			{30, 35, release("L1", false, unknown).in, released(0, true)},
		}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			res := Check(c.promise, history(c.ops), 0)
			if got := res.Result == porcupine.Ok; got != c.ok {
				t.Fatalf("linearizable = %v (%s), want %v; visualization: %s", got, res.Result, c.ok, res.Visualization)
			}
		})
	}
}
