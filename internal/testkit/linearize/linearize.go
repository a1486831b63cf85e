// Package linearize holds the sequential models of lockapi's lock kinds
// (docs/LOCK_KINDS.md) for the porcupine linearizability checker: a history
// of operations seen from outside (call time, return time, request, answer)
// is linearizable when some order of its operations, each placed between
// its call and its return, is a run of the model.
//
// One model covers every kind, since the kind is decided per acquire: a
// name holds leases (exclusive, shared or permits), each with its owner,
// hold count and fencing token. The model is partitioned by name: every
// operation concerns one name. A multi-lock is recorded as one operation
// per name (see Take and GiveBack), since it takes its names one at a time
// and promises no more (docs/LOCK_KINDS.md, "Multi-locks").
//
// An operation whose answer never came (a transport error, a 503) is
// recorded with Unknown set and a return time of infinity: the model lets it
// take effect, or not, at any point after its call. A lease granted that
// way has no known id or token until a later answer names it. An acquire
// answered 5xx is recorded with Abandoned too: lockapi undoes the hold it
// may have taken, at a moment nobody sees, so the model may drop that hold
// before any later operation.
//
// Sessions (docs/SESSIONS.md) span names: a session's end releases every
// lease bound to it at one point in the history. Operations that name a
// Group are checked together, one state per name and the sessions that
// ended (session.go), so that the point is one for all of the group's
// names.
package linearize

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/anishathalye/porcupine"
)

// Kind says what an operation does.
type Kind uint8

const (
	// Acquire is POST /v1/locks/{name}/leases, or one name's part of a
	// multi-lock that was granted.
	Acquire Kind = iota
	// Release is DELETE /v1/locks/{name}/leases/{id} (?all=true with All).
	Release
	// Join is a fair waiter taking its place in the name's queue: it is
	// recorded beside the fair Acquire that waits, from that acquire's
	// call to the moment the test saw the place taken.
	Join
	// Take is a refused multi-lock's hold on one name it took before it
	// met the name in its way; GiveBack, with the same Tag, undoes exactly
	// that hold.
	Take
	GiveBack
	// SessionRenew is POST /v1/sessions/{id}/renew: 200 while the session
	// lives, 410 session-lost once it ended.
	SessionRenew
	// SessionGet is GET /v1/sessions/{id}: as SessionRenew, without the
	// renewal (the model keeps no expiry: see SessionExpire).
	SessionGet
	// SessionEnd is DELETE /v1/sessions/{id}: it releases every lease
	// bound to the session at one point, and the session ends.
	SessionEnd
	// SessionExpire is a session's expiry, which no request makes: it is
	// recorded from the earliest moment the server's clock may end the
	// session (its last renewal's call plus its TTL) to the answer that
	// showed it ended (a 410 session-lost). It ends the session, and every
	// lease bound to it, at one point in between, unless the session had
	// ended already.
	SessionExpire
)

// Input is an operation's request.
type Input struct {
	Kind   Kind
	Lock   string
	Owner  string
	Shared bool // "mode": "shared"
	Limit  int  // "limit": a semaphore's permits; 0 for a lock
	Fair   bool // "fair": true with wait_ms: granted only at the queue's head
	// Tag names the operation: a fair waiter's queue place (Join and its
	// Acquire share it), a refused multi-lock's hold (Take and GiveBack
	// share it), the lease an Unknown acquire may have granted, and the
	// hold an abandoned acquire may have taken.
	Tag     string
	LeaseID string // Release
	All     bool   // Release: every hold
	// Session is the session an Acquire binds its lease to ("" for none),
	// and the session a session operation concerns.
	Session string
	// Group is the partition the operation is checked in: the names a
	// session's leases may span, checked together. "" is Lock alone.
	Group string
}

// holder is who holds a lease for reentrancy: the owner, and the session
// its lease is bound to (docs/SESSIONS.md, "Binding").
func (in Input) holder() string { return in.Owner + "\x00" + in.Session }

// partition is the key of the partition the operation is checked in.
func (in Input) partition() string { return cmp.Or(in.Group, in.Lock) }

// Output is an operation's answer.
type Output struct {
	// Unknown: no answer came (transport error, 5xx); the operation may
	// or may not have taken effect. Its return time is infinity.
	Unknown bool
	// Abandoned, with Unknown, on an acquire: lockapi answered 5xx and
	// undoes whatever the acquire granted (README: "A grant whose answer
	// lockapi could not deliver is undone"), in the background, before
	// the answer or long after it, or never (a later acquire of the lease
	// came first). The model may drop that hold before any operation.
	Abandoned bool
	Status    int
	Problem   string // the problem type's last segment: lock-held, lease-lost, ...
	// An acquire's lease; a release's remaining hold count and Released.
	LeaseID   string
	Token     uint64
	HoldCount int
	Released  bool
	// A lock-held problem's holder; HolderOwner "" when it names none.
	HolderOwner string
	HolderToken uint64
}

// Infinity is the return time of an operation whose answer never came.
const Infinity = math.MaxInt64

// Promise says how exactly a store's answers describe the lock. Strict is
// what docs/LOCK_KINDS.md promises for the memory, single-Redis, Sentinel
// and Cluster stores; a weaker promise (redlock's answers) relaxes only what
// the answers report, never who holds the lock.
type Promise struct {
	// ExactHoldCount: a reentrant acquire answers the lease's hold count
	// after it, and a release the count left. Without it an answer may
	// report any count of at least 1 (0 for a release): redlock's answers
	// report the largest count of the masters, which may include holds of
	// acquires still in flight. Whether a release ended the lease is
	// always checked.
	ExactHoldCount bool
	// ExactHolderToken: a lock-held problem names the fencing token of the
	// lease in the way. Without it the holder's owner must still be right.
	ExactHolderToken bool
	// UnnamedRefusals: a lock-held problem that names no holder promises
	// only that the acquire took no effect, in any state, the free lock
	// included (redlock mode: the masters did not all show one lease with
	// one token; docs/TOPOLOGIES.md, "What redlock's answers promise").
	// Without it such a refusal means only a queue was in the way.
	UnnamedRefusals bool
	// FirstMasterRefusals: upgrade-refused and limit-mismatch promise only
	// that the acquire took no effect (redlock mode: they are one
	// master's answer, which may see the lease of an acquire then undone).
	FirstMasterRefusals bool
}

// Strict is the promise of docs/LOCK_KINDS.md.
var Strict = Promise{ExactHoldCount: true, ExactHolderToken: true}

// Redlock is the promise of redlock mode's answers (docs/TOPOLOGIES.md):
// Strict, but for a lock-held problem that names no holder. Hold counts are
// exact while no master is down or slower than its deadline, which a run
// with a long LOCKAPI_REDLOCK_TIMEOUT and no faults ensures.
var Redlock = Promise{ExactHoldCount: true, ExactHolderToken: true, UnnamedRefusals: true, FirstMasterRefusals: true}

// Model returns the porcupine model of the lock kinds under promise p.
//
// The model is nondeterministic (an operation of unknown outcome took
// effect or did not), so porcupine's state is the set of states the
// history so far may have led to. That set is built here, sorted by each
// state's key, not with porcupine's NondeterministicModel, which compares
// each step's states pairwise: that costs the square of the set's size,
// and a name with a few dozen operations of unknown outcome (a Sentinel
// failover's 5xx answers) has large sets. A state is a world: one state
// per name of the partition, and the sessions that ended (session.go).
func Model(p Promise) porcupine.Model {
	return porcupine.Model{
		Partition: byLock,
		Init:      func() any { return worlds{&world{}} },
		Step: func(s, in, out any) (bool, any) {
			var next []*world
			for _, w := range s.(worlds) {
				next = append(next, w.step(p, in.(Input), out.(Output))...)
			}
			set := newWorlds(next)
			return len(set) > 0, set
		},
		Equal:             func(a, b any) bool { return a.(worlds).equal(b.(worlds)) },
		Hash:              func(s any) uint64 { return s.(worlds).hash() },
		DescribeOperation: describe,
		DescribeState:     func(s any) string { return s.(worlds).String() },
	}
}

// byLock partitions a history by name, or by group where operations name
// one: no operation touches two partitions.
func byLock(history []porcupine.Operation) [][]porcupine.Operation {
	idx := map[string]int{}
	var parts [][]porcupine.Operation
	for _, op := range history {
		name := op.Input.(Input).partition()
		i, ok := idx[name]
		if !ok {
			i = len(parts)
			idx[name] = i
			parts = append(parts, nil)
		}
		parts[i] = append(parts[i], op)
	}
	return parts
}

// lease is one lease of the name. A lease granted by an operation whose
// answer never came has id "" until an answer names it, and token 0 until
// one names its token; its token then lies in (floor, ceil).
type lease struct {
	key     string // id, or "?"+tag while the id is unknown
	id      string
	owner   string
	session string // the session it is bound to; "" for none
	shared  bool
	permit  bool
	holds   int
	token   uint64
	floor   uint64 // unknown token: larger than every token granted before it
	ceil    uint64 // unknown token: smaller than this one, granted after it (0: none yet)
}

// take is a hold that a later operation undoes: a refused multi-lock's,
// undone by its GiveBack, or an abandoned acquire's, which lockapi may undo
// at any moment (settle).
type take struct {
	tag, key  string
	abandoned bool
}

// state is one name. Step never changes a state: it returns new ones,
// each changed only between its clone and its return.
type state struct {
	leases       []lease // in grant order
	limit        int     // the semaphore's limit while permits are held
	maxToken     uint64  // the largest token answered
	lastReleased string  // the lease id whose release is answered again
	queue        []string
	takes        []take

	// key is String's answer, made at its first call: sets of states
	// (Model) are ordered and compared by it at every step, and formatting
	// each state at each comparison took nine tenths of a check's time.
	key string
}

func (s *state) clone() *state {
	c := *s
	c.key = ""
	c.leases = slices.Clone(s.leases)
	c.queue = slices.Clone(s.queue)
	c.takes = slices.Clone(s.takes)
	return &c
}

func (s *state) String() string {
	if s.key == "" {
		s.key = s.describe()
	}
	return s.key
}

func (s *state) describe() string {
	var b strings.Builder
	for _, l := range s.leases {
		mode := "x"
		switch {
		case l.permit:
			mode = "p"
		case l.shared:
			mode = "s"
		}
		fmt.Fprintf(&b, "%s[%s %s %d holds, token %d", l.owner, l.key, mode, l.holds, l.token)
		if l.session != "" {
			fmt.Fprintf(&b, " session %s", l.session)
		}
		if l.token == 0 {
			fmt.Fprintf(&b, " in (%d,%d)", l.floor, l.ceil)
		}
		b.WriteString("] ")
	}
	fmt.Fprintf(&b, "limit %d max %d last %s queue %v takes %v", s.limit, s.maxToken, s.lastReleased, s.queue, s.takes)
	return b.String()
}

// holder is who holds l for reentrancy (Input.holder).
func (l lease) holder() string { return l.owner + "\x00" + l.session }

func (s *state) find(id string) int {
	return slices.IndexFunc(s.leases, func(l lease) bool { return l.id == id && id != "" })
}

// decision is what the store rules decide for an acquire.
type decision struct {
	reenter  int    // index of the lease re-entered, -1 for none
	inTheWay []int  // the leases that refuse it
	queued   bool   // the queue refuses it (fair waiters ahead)
	refusal  string // upgrade-refused or limit-mismatch
}

func (d decision) grants() bool {
	return d.refusal == "" && (d.reenter >= 0 || (len(d.inTheWay) == 0 && !d.queued))
}

// decide applies the store rules (docs/LOCK_KINDS.md, "Store rules") to an
// acquire, without waiting.
func (s *state) decide(in Input) decision {
	d := decision{reenter: -1}
	if s.limit != in.Limit && (s.limit > 0 || len(s.leases) > 0) {
		d.refusal = "limit-mismatch"
		return d
	}
	skipQueue := false
	switch {
	case in.Limit > 0:
		if len(s.leases) >= in.Limit {
			for i := range s.leases {
				d.inTheWay = append(d.inTheWay, i)
			}
		}
	case !in.Shared:
		for i, l := range s.leases {
			switch {
			case l.holder() == in.holder() && !l.shared:
				d.reenter = i
				return d
			case l.holder() == in.holder() && l.shared:
				d.refusal = "upgrade-refused"
			case l.holder() != in.holder():
				d.inTheWay = append(d.inTheWay, i)
			}
		}
		if d.refusal != "" {
			d.inTheWay = nil
			return d
		}
	default:
		for i, l := range s.leases {
			switch {
			case l.holder() == in.holder() && l.shared:
				d.reenter = i
				d.inTheWay = nil
				return d
			case !l.shared && l.holder() != in.holder():
				d.inTheWay = append(d.inTheWay, i)
			case !l.shared:
				skipQueue = true // a downgrade never waits for writers
			}
		}
	}
	// The queue holds only fair waiters, and they hold off every acquire
	// but its head's (rule 8).
	if !skipQueue && len(s.queue) > 0 && !(in.Fair && s.queue[0] == in.Tag) {
		d.queued = true
	}
	return d
}

// step returns the states that in, answered out, may lead to from s; none
// when the answer is impossible.
func (s *state) step(p Promise, in Input, out Output) []*state {
	switch in.Kind {
	case Acquire:
		return s.acquire(p, in, out)
	case Release:
		return s.release(p, in, out)
	case Join:
		if slices.Contains(s.queue, in.Tag) {
			return []*state{s}
		}
		n := s.clone()
		n.queue = append(n.queue, in.Tag)
		return []*state{n}
	case Take:
		d := s.decide(in)
		if !d.grants() {
			return nil
		}
		n := s.grant(in, d)
		n.takes = append(n.takes, take{tag: in.Tag, key: n.leaseKey(in, d)})
		return []*state{n}
	case GiveBack:
		n := s.undo(in.Tag)
		if n == nil {
			return nil // given back before it was taken
		}
		return []*state{n}
	}
	return nil
}

// settle returns s and every state that undoing some of its abandoned
// holds leads to.
func (s *state) settle() []*state {
	out := []*state{s}
	for _, t := range s.takes {
		if !t.abandoned {
			continue
		}
		for _, x := range out[:len(out):len(out)] {
			if n := x.undo(t.tag); n != nil {
				out = append(out, n)
			}
		}
	}
	return out
}

// undo drops the hold taken under tag; nil when none was taken.
func (s *state) undo(tag string) *state {
	i := slices.IndexFunc(s.takes, func(t take) bool { return t.tag == tag })
	if i < 0 {
		return nil
	}
	n := s.clone()
	key := n.takes[i].key
	n.takes = slices.Delete(n.takes, i, i+1)
	if j := slices.IndexFunc(n.leases, func(l lease) bool { return l.key == key }); j >= 0 {
		n.dropHold(j, false)
	}
	return n
}

// leaseKey is the key of the lease that d's grant of in re-entered or made.
func (s *state) leaseKey(in Input, d decision) string {
	if d.reenter >= 0 {
		return s.leases[d.reenter].key
	}
	return s.leases[len(s.leases)-1].key
}

// grant applies a grant whose answer is unknown: a fresh lease has no known
// id or token.
func (s *state) grant(in Input, d decision) *state {
	n := s.clone()
	n.leaveQueue(in.Tag)
	if d.reenter >= 0 {
		n.leases[d.reenter].holds++
		return n
	}
	n.leases = append(n.leases, lease{key: "?" + in.Tag, owner: in.Owner, session: in.Session, shared: in.Shared,
		permit: in.Limit > 0, holds: 1, floor: n.maxToken})
	n.limit = in.Limit
	return n
}

func (s *state) leaveQueue(tag string) {
	if i := slices.Index(s.queue, tag); i >= 0 {
		s.queue = slices.Delete(s.queue, i, i+1)
	}
}

func (s *state) acquire(p Promise, in Input, out Output) []*state {
	d := s.decide(in)
	if out.Unknown {
		return s.acquireUnknown(in, out, d)
	}
	switch {
	case out.Status == 201 && d.grants() && d.reenter < 0:
		if out.HoldCount != 1 || out.LeaseID == "" || s.find(out.LeaseID) >= 0 || out.Token <= s.maxToken {
			return nil
		}
		n := s.clone()
		n.leaveQueue(in.Tag)
		for i := range n.leases {
			if n.leases[i].token == 0 && n.leases[i].ceil == 0 {
				n.leases[i].ceil = out.Token
			}
		}
		n.leases = append(n.leases, lease{key: out.LeaseID, id: out.LeaseID, owner: in.Owner, session: in.Session,
			shared: in.Shared, permit: in.Limit > 0, holds: 1, token: out.Token})
		n.limit = in.Limit
		n.maxToken = out.Token
		return []*state{n}
	case out.Status == 200 && d.grants() && d.reenter >= 0:
		l := s.leases[d.reenter]
		if !holdCount(p, out.HoldCount, l.holds+1, 1) {
			return nil
		}
		n := s.clone()
		n.leaveQueue(in.Tag)
		if !n.name(d.reenter, out.LeaseID, out.Token) {
			return nil
		}
		n.leases[d.reenter].holds++
		return []*state{n}
	case out.Status == 409 && out.Problem == "lock-held" && out.HolderOwner == "" && p.UnnamedRefusals,
		out.Status == 409 && (out.Problem == "upgrade-refused" || out.Problem == "limit-mismatch") && p.FirstMasterRefusals:
		return []*state{s.refusedUnnamed(in)}
	case out.Status == 409 && out.Problem == "lock-held" && !d.grants() && d.refusal == "":
		n := s
		if in.Fair {
			n = s.clone()
			n.leaveQueue(in.Tag) // a fair waiter whose wait ran out leaves
		}
		if out.HolderOwner == "" {
			if len(d.inTheWay) > 0 {
				return nil
			}
			return []*state{n}
		}
		var next []*state
		for _, i := range d.inTheWay {
			l := s.leases[i]
			if l.owner != out.HolderOwner {
				continue
			}
			if !p.ExactHolderToken {
				return []*state{n}
			}
			m := n.clone()
			if m.name(i, "", out.HolderToken) {
				next = append(next, m)
			}
		}
		return next
	case out.Status == 409 && out.Problem == d.refusal && d.refusal != "":
		return []*state{s}
	}
	return nil
}

// name checks an answer's id and token for lease i against what the model
// knows, and learns them where it did not know them. It changes s: call it
// on a clone.
func (s *state) name(i int, id string, token uint64) bool {
	l := &s.leases[i]
	if id != "" {
		switch {
		case l.id == "":
			if s.find(id) >= 0 {
				return false
			}
			l.id = id
		case l.id != id:
			return false
		}
	}
	switch {
	case l.token == 0:
		if token <= l.floor || (l.ceil != 0 && token >= l.ceil) {
			return false
		}
		l.token = token
		s.maxToken = max(s.maxToken, token)
	case l.token != token:
		return false
	}
	return true
}

// holdCount says whether an answered hold count fits the model's.
func holdCount(p Promise, answered, model, least int) bool {
	if p.ExactHoldCount {
		return answered == model
	}
	return answered >= least
}

func (s *state) release(p Promise, in Input, out Output) []*state {
	i := s.find(in.LeaseID)
	if i < 0 {
		retried := in.LeaseID == s.lastReleased && in.LeaseID != ""
		switch {
		case out.Unknown:
			return []*state{s}
		case retried && out.Status == 200 && out.Released && out.HoldCount == 0:
			return []*state{s}
		case !retried && out.Status == 410 && out.Problem == "lease-lost":
			return []*state{s}
		}
		return nil
	}
	n := s.clone()
	ended := n.dropHold(i, in.All)
	if ended {
		n.lastReleased = in.LeaseID
	}
	left := 0
	if !ended {
		left = n.leases[i].holds
	}
	switch {
	case out.Unknown:
		return []*state{s, n}
	case out.Status == 200 && out.Released == ended && holdCount(p, out.HoldCount, left, min(left, 1)):
		return []*state{n}
	}
	return nil
}

// dropHold drops one hold of lease i, or all of them, and says whether the
// lease ended. It changes s: call it on a clone.
func (s *state) dropHold(i int, all bool) bool {
	if !all && s.leases[i].holds > 1 {
		s.leases[i].holds--
		return false
	}
	key := s.leases[i].key
	s.leases = slices.Delete(s.leases, i, i+1)
	// An abandoned hold of an ended lease has nothing left to undo.
	s.takes = slices.DeleteFunc(s.takes, func(t take) bool { return t.abandoned && t.key == key })
	if len(s.leases) == 0 {
		s.limit = 0
	}
	return true
}

func describe(in, out any) string {
	i, o := in.(Input), out.(Output)
	var req string
	mode := ""
	switch {
	case i.Limit > 0:
		mode = fmt.Sprintf(" limit %d", i.Limit)
	case i.Shared:
		mode = " shared"
	}
	if i.Fair {
		mode += " fair"
	}
	if i.Session != "" && i.Kind == Acquire {
		mode += " session " + i.Session
	}
	switch i.Kind {
	case SessionRenew, SessionGet, SessionEnd, SessionExpire:
		return describeSession(i, o)
	case Acquire:
		req = fmt.Sprintf("acquire(%s %s%s)", i.Lock, i.Owner, mode)
	case Release:
		all := ""
		if i.All {
			all = " all"
		}
		req = fmt.Sprintf("release(%s %s%s)", i.Lock, i.LeaseID, all)
	case Join:
		return fmt.Sprintf("join(%s %s %s)", i.Lock, i.Owner, i.Tag)
	case Take:
		return fmt.Sprintf("multi-take(%s %s%s %s)", i.Lock, i.Owner, mode, i.Tag)
	case GiveBack:
		return fmt.Sprintf("multi-give-back(%s %s)", i.Lock, i.Tag)
	}
	switch {
	case o.Unknown && o.Abandoned:
		return req + " -> 5xx (abandoned)"
	case o.Unknown:
		return req + " -> ?"
	case o.Status == 409 && o.Problem == "lock-held":
		return fmt.Sprintf("%s -> 409 held by %s token %d", req, o.HolderOwner, o.HolderToken)
	case o.Status >= 400:
		return fmt.Sprintf("%s -> %d %s", req, o.Status, o.Problem)
	case i.Kind == Release:
		return fmt.Sprintf("%s -> %d holds %d released %v", req, o.Status, o.HoldCount, o.Released)
	}
	return fmt.Sprintf("%s -> %d %s token %d holds %d", req, o.Status, o.LeaseID, o.Token, o.HoldCount)
}

// acquireUnknown is the states after an acquire with no answer: it took no
// effect, or it granted (and lockapi may undo that grant later).
func (s *state) acquireUnknown(in Input, out Output, d decision) []*state {
	next := []*state{s}
	if d.grants() {
		n := s.grant(in, d)
		if out.Abandoned {
			n.takes = append(n.takes, take{in.Tag, n.leaseKey(in, d), true})
		}
		next = append(next, n)
	}
	if in.Fair { // a waiter that gave up left the queue
		n := s.clone()
		n.leaveQueue(in.Tag)
		next = append(next, n)
	}
	return next
}

// refusedUnnamed is the state after a lock-held problem that names no
// holder under Promise.UnnamedRefusals: nothing changed, but a fair waiter
// whose wait ran out left the queue.
func (s *state) refusedUnnamed(in Input) *state {
	if !in.Fair {
		return s
	}
	n := s.clone()
	n.leaveQueue(in.Tag)
	return n
}
