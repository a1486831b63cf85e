// Package fencetoken is the fencing token rule: how the service issues a
// grant's token, the one rule every store follows and the reference for the
// code that cannot call it. It is the issuing side; the checking side, the
// guards a resource uses to refuse a stale token, is the public package
// fence (github.com/lockapi/lockapi/fence), which takes its bound from here.
//
// A fresh grant's token is max(last+1, now in microseconds) (Next). The
// counter alone gives strictly increasing tokens while the store keeps its
// data; the clock floor keeps them increasing when the store loses the
// counter (a restart without persistence, a failover to a lagging replica,
// FLUSHALL), provided the store's clock has not gone back past the last
// token issued. Tokens stop at MaxToken, 2^53-1: microseconds since 1970
// stay below it until the year 2255, and below it every token is exact in a
// JavaScript number and in a Lua number in Redis.
//
// Who applies it:
//   - the memory store calls Next;
//   - the Redis store applies it inside its acquire scripts, in Lua
//     (internal/store/redis/scripts/acquire.lua's next_token, and
//     acquire_fast.lua), since the counter and the grant must change in one
//     atomic step; a test there pins the scripts' bound to MaxToken;
//   - redlock, over several masters each proposing its own next token,
//     decides the grant's token with Majority;
//   - the public guards (package fence and its backends), which resources
//     use to refuse stale tokens, refuse tokens above MaxToken.
package fencetoken

import (
	"errors"
	"time"
)

// MaxToken is the largest fencing token: 2^53-1, exact in a JavaScript
// number and in a Lua number in Redis. It is untyped, so that package fence
// can pass it on to code outside this module as its own constant.
const MaxToken = 1<<53 - 1

// ErrExhausted means the token space is used up; it cannot happen before
// the year 2255 unless a clock is far in the future.
var ErrExhausted = errors.New("fencing token space exhausted")

// Next returns the token of a fresh grant after last, given the store's
// clock: max(last+1, now in microseconds), at most MaxToken.
func Next(last uint64, now time.Time) (uint64, error) {
	next := last + 1
	if us := now.UnixMicro(); us > 0 && uint64(us) > next {
		next = uint64(us)
	}
	if next > MaxToken {
		return 0, ErrExhausted
	}
	return next, nil
}

// Proposal is one store's answer to a grant made on several independent
// stores at once (redlock's masters): the token it gave the lease, and
// whether it granted the lease afresh (a new token by Next) or re-entered
// it (the token the lease already had there).
type Proposal struct {
	Token uint64
	Fresh bool
}

// Decision is the token of a grant made on a majority of stores.
type Decision struct {
	Token uint64
	// Fresh: every store granted the lease afresh. Otherwise the lease was
	// re-entered, and a store that proposed a fresh token had lost it.
	Fresh bool
	// WriteBack: the token must be written back to the stores (a majority
	// of them must take it) before the grant is answered.
	WriteBack bool
}

// Majority decides the token of a grant from the proposals of the stores
// that granted it, a majority of them:
//
//   - A fresh grant takes the largest proposal, and is written back: any
//     later majority shares a store with this one, whose counter is then
//     at least this token, so every later token is larger.
//   - A re-entered lease keeps the largest token of the stores that held
//     it (they agree unless one lost and regained it); it is written back
//     when the proposals differ, so that every store holds it with one
//     token.
func Majority(proposals []Proposal) Decision {
	d := Decision{Fresh: len(proposals) > 0}
	for _, p := range proposals {
		d.Fresh = d.Fresh && p.Fresh
	}
	for _, p := range proposals {
		if p.Fresh == d.Fresh {
			d.Token = max(d.Token, p.Token)
		}
	}
	d.WriteBack = d.Fresh
	for _, p := range proposals {
		d.WriteBack = d.WriteBack || p.Token != d.Token
	}
	return d
}
