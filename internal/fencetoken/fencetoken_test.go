package fencetoken_test

import (
	"errors"
	"testing"
	"time"

	"github.com/lockapi/lockapi/internal/fencetoken"
)

func TestNext(t *testing.T) {
	now := time.UnixMicro(1_795_000_000_000_000)
	us := uint64(now.UnixMicro())

	t.Run("OK_clock_floor", func(t *testing.T) {
		// A store that lost its counter starts again from the clock.
		if got, err := fencetoken.Next(0, now); err != nil || got != us {
			t.Fatalf("Next(0) = %d, %v; want %d", got, err, us)
		}
	})
	t.Run("OK_counter_ahead_of_clock", func(t *testing.T) {
		// Grants faster than one a microsecond, or a clock that went back:
		// the counter still rises.
		if got, err := fencetoken.Next(us+5, now); err != nil || got != us+6 {
			t.Fatalf("Next(us+5) = %d, %v; want %d", got, err, us+6)
		}
	})
	t.Run("OK_clock_before_1970", func(t *testing.T) {
		if got, err := fencetoken.Next(41, time.Unix(-1, 0)); err != nil || got != 42 {
			t.Fatalf("Next(41) = %d, %v; want 42", got, err)
		}
	})
	t.Run("OK_last_token", func(t *testing.T) {
		if got, err := fencetoken.Next(fencetoken.MaxToken-1, now); err != nil || got != fencetoken.MaxToken {
			t.Fatalf("Next(MaxToken-1) = %d, %v; want MaxToken", got, err)
		}
	})
	t.Run("ErrTokenExhausted", func(t *testing.T) {
		if _, err := fencetoken.Next(fencetoken.MaxToken, now); !errors.Is(err, fencetoken.ErrExhausted) {
			t.Fatalf("Next(MaxToken): %v, want ErrExhausted", err)
		}
		if _, err := fencetoken.Next(0, time.UnixMicro(fencetoken.MaxToken+1)); !errors.Is(err, fencetoken.ErrExhausted) {
			t.Fatalf("NextToken with a clock past 2^53 µs: %v, want ErrExhausted", err)
		}
	})
}

func TestMajority(t *testing.T) {
	fresh := func(tokens ...uint64) (ps []fencetoken.Proposal) {
		for _, tk := range tokens {
			ps = append(ps, fencetoken.Proposal{Token: tk, Fresh: true})
		}
		return ps
	}
	held := func(tokens ...uint64) (ps []fencetoken.Proposal) {
		for _, tk := range tokens {
			ps = append(ps, fencetoken.Proposal{Token: tk})
		}
		return ps
	}
	for _, tc := range []struct {
		name      string
		proposals []fencetoken.Proposal
		want      fencetoken.Decision
	}{
		// A fresh grant takes the largest proposal, always written back.
		{"Fresh_largest", fresh(7, 9, 8), fencetoken.Decision{Token: 9, Fresh: true, WriteBack: true}},
		{"Fresh_agreeing", fresh(9, 9), fencetoken.Decision{Token: 9, Fresh: true, WriteBack: true}},
		// A re-entered lease keeps its token; nothing to write back when
		// every master agrees.
		{"Reentered_agreeing", held(5, 5, 5), fencetoken.Decision{Token: 5}},
		{"Reentered_disagreeing", held(5, 4), fencetoken.Decision{Token: 5, WriteBack: true}},
		// A master that lost the lease granted it afresh with a larger
		// token: the lease keeps the held token, and every master is told.
		{"Reentered_one_lost_it", append(held(5, 5), fresh(100)...), fencetoken.Decision{Token: 5, WriteBack: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := fencetoken.Majority(tc.proposals); got != tc.want {
				t.Fatalf("Majority(%+v) = %+v, want %+v", tc.proposals, got, tc.want)
			}
		})
	}
}
