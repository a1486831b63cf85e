package webhook

import (
	"math/rand/v2"
	"time"
)

// Backoff spaces the attempts at one event: exponential with full jitter
// (the wait before the n-th retry is uniform in [0, min(Max, Min·2^(n-1))),
// as in "Exponential Backoff And Jitter", AWS Architecture Blog), so that
// the retries of many subscriptions to one receiver that came back do not
// arrive in waves.
type Backoff struct {
	Min time.Duration // the ceiling of the first wait
	Max time.Duration // the largest ceiling
}

// DefaultBackoff is what deliveries use unless configured: waits whose
// ceiling doubles from 1 s up to 30 min, so a day of retries makes some 60
// attempts.
var DefaultBackoff = Backoff{Min: time.Second, Max: 30 * time.Minute}

// Ceiling is the bound of the wait after failures failed attempts (1 or
// more): Min·2^(failures-1), at most Max.
func (b Backoff) Ceiling(failures int) time.Duration {
	c := b.Min
	for i := 1; i < failures && c < b.Max; i++ {
		c *= 2
	}
	return min(c, b.Max)
}

// Delay draws the wait after failures failed attempts: uniform in
// [0, Ceiling(failures)).
func (b Backoff) Delay(failures int) time.Duration {
	c := b.Ceiling(failures)
	if c <= 0 {
		return 0
	}
	return rand.N(c)
}
