package auth

import (
	"context"
	"fmt"
	"math/bits"
	"testing"
	"time"
)

// Signing out sweeps the revocations only when they have doubled since the
// last sweep: n sign-outs sweep O(log n) times, not n; records that ran
// out are still dropped, and a revoked session stays revoked.
func TestMemoryRevocations_sweeps_are_amortized(t *testing.T) {
	ctx := context.Background()
	m := MemoryRevocations().(*memRevocations)
	const n = 10000
	live := time.Now().Add(time.Hour)
	for i := range n {
		if err := m.Revoke(ctx, fmt.Sprint("live-", i), live); err != nil {
			t.Fatal(err)
		}
	}
	if limit := bits.Len(n) + 1; m.sweeps > limit {
		t.Errorf("%d sign-outs swept the records %d times, want at most %d", n, m.sweeps, limit)
	}
	for _, id := range []string{"live-0", fmt.Sprint("live-", n-1)} {
		if ok, _ := m.Revoked(ctx, id); !ok {
			t.Errorf("%s is not revoked", id)
		}
	}

	// Records that ran out are dropped: they never outnumber the live
	// ones and minSweep.
	past := time.Now().Add(-time.Second)
	for i := range 4 * n {
		if err := m.Revoke(ctx, fmt.Sprint("gone-", i), past); err != nil {
			t.Fatal(err)
		}
		if len(m.ids) > 2*n+minSweep+1 {
			t.Fatalf("%d records kept for %d live ones", len(m.ids), n)
		}
	}
}
