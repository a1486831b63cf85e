package lock

import (
	"errors"
	"time"
)

// The fencing token rule: a fresh grant's token is max(last+1, now in
// microseconds). The counter alone gives strictly increasing tokens while
// the store keeps its data; the clock floor keeps them increasing when the
// store loses the counter (a restart without persistence, a failover to a
// lagging replica, FLUSHALL), provided the store's clock has not gone back
// past the last token issued. Microseconds since 1970 stay below 2^53 until
// the year 2255, so JavaScript clients read every token exactly.
//
// The memory store calls NextToken; the Redis acquire script applies the
// same rule in Lua (internal/store/redis/scripts/acquire.lua), and package
// fence, which resources use to refuse stale tokens, refers to MaxToken.

// MaxToken is the largest fencing token: 2^53-1, exact in a JavaScript
// number and in a Lua number in Redis.
const MaxToken = 1<<53 - 1

// ErrTokenExhausted means the token space is used up; it cannot happen
// before the year 2255 unless a clock is far in the future.
var ErrTokenExhausted = errors.New("fencing token space exhausted")

// NextToken returns the token of a fresh grant after last, given the
// store's clock.
func NextToken(last uint64, now time.Time) (uint64, error) {
	next := last + 1
	if us := now.UnixMicro(); us > 0 && uint64(us) > next {
		next = uint64(us)
	}
	if next > MaxToken {
		return 0, ErrTokenExhausted
	}
	return next, nil
}
