// Package fence lets a resource protected by a lockapi lock refuse writes
// from a holder that has lost the lock without knowing it.
//
// A lock holder can pause (GC, swap, a slow network) past its lease; by the
// time it wakes up the lock may belong to someone else. Checking the lease
// before writing does not help, because the pause can come right after the
// check. So lockapi hands out a fencing token with every grant, higher for
// each fresh grant of a lock, and the resource itself enforces the rule:
//
//	Keep the highest token admitted so far. Admit a write whose token is
//	greater than or equal to it, and remember the new token. Refuse a write
//	whose token is lower: it comes from an older holder.
//
// Equal tokens are admitted, because one lease makes many writes with one
// token. Tokens are below 2^53 (MaxToken).
//
// Writers send the token they got with the lock, and the resource checks it
// atomically with the write. The guards are one package per backend, so
// that a program pulls in only the driver of the resource it guards:
//
//   - [github.com/lockapi/lockapi/fence/postgres]: Admit in the
//     transaction that writes, with the schema of package
//     [github.com/lockapi/lockapi/migrations];
//   - [github.com/lockapi/lockapi/fence/redis]: a Guard that keeps the
//     highest token in a key and can make the write in the same script.
//
// This package holds what they share: the token bound and the errors, so
// that errors.Is(err, fence.ErrStale) reads the same whichever guard
// answered. It is the checking side of fencing; how the service issues
// tokens (the token rule) is internal/fencetoken.
//
// The fence works only if every writer of the resource goes through it with
// the same resource name (or token key).
package fence

import (
	"errors"

	"github.com/lockapi/lockapi/internal/fencetoken"
)

// MaxToken is the largest token lockapi issues: 2^53-1, exact in a JSON
// number read by JavaScript and in a Lua number in Redis. It is the
// service's own limit (where the token rule lives), passed on as an untyped
// constant, so that there is one definition and code outside this module
// can still use it.
const MaxToken = fencetoken.MaxToken

var (
	// ErrStale means a higher token has already been admitted: the lock was
	// granted to someone else since this token was issued, so the write must
	// not happen.
	ErrStale = errors.New("fence: stale token")

	// ErrTokenRange means the token is above MaxToken and so was not issued
	// by lockapi.
	ErrTokenRange = errors.New("fence: token above 2^53-1")

	// ErrNoResource means the resource name or key is empty.
	ErrNoResource = errors.New("fence: empty resource name")
)
