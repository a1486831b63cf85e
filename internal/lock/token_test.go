package lock_test

import (
	"errors"
	"testing"
	"time"

	"github.com/lockapi/lockapi/internal/lock"
)

func TestNextToken(t *testing.T) {
	now := time.UnixMicro(1_795_000_000_000_000)
	us := uint64(now.UnixMicro())

	t.Run("OK_clock_floor", func(t *testing.T) {
		// A store that lost its counter starts again from the clock.
		if got, err := lock.NextToken(0, now); err != nil || got != us {
			t.Fatalf("NextToken(0) = %d, %v; want %d", got, err, us)
		}
	})
	t.Run("OK_counter_ahead_of_clock", func(t *testing.T) {
		// Grants faster than one a microsecond, or a clock that went back:
		// the counter still rises.
		if got, err := lock.NextToken(us+5, now); err != nil || got != us+6 {
			t.Fatalf("NextToken(us+5) = %d, %v; want %d", got, err, us+6)
		}
	})
	t.Run("OK_clock_before_1970", func(t *testing.T) {
		if got, err := lock.NextToken(41, time.Unix(-1, 0)); err != nil || got != 42 {
			t.Fatalf("NextToken(41) = %d, %v; want 42", got, err)
		}
	})
	t.Run("OK_last_token", func(t *testing.T) {
		if got, err := lock.NextToken(lock.MaxToken-1, now); err != nil || got != lock.MaxToken {
			t.Fatalf("NextToken(MaxToken-1) = %d, %v; want MaxToken", got, err)
		}
	})
	t.Run("ErrTokenExhausted", func(t *testing.T) {
		if _, err := lock.NextToken(lock.MaxToken, now); !errors.Is(err, lock.ErrTokenExhausted) {
			t.Fatalf("NextToken(MaxToken): %v, want ErrTokenExhausted", err)
		}
		if _, err := lock.NextToken(0, time.UnixMicro(lock.MaxToken+1)); !errors.Is(err, lock.ErrTokenExhausted) {
			t.Fatalf("NextToken with a clock past 2^53 µs: %v, want ErrTokenExhausted", err)
		}
	})
}
