package memory

import (
	"context"
	"testing"
	"time"

	"github.com/lockapi/lockapi/internal/lock"
)

// The sweeper drops expired leases of every mode and lapsed queue places,
// and with them the names that hold nothing else.
func TestSweep_drops_expired_leases_and_places(t *testing.T) {
	m := New()
	defer m.Close()
	ctx := context.Background()
	for _, req := range []lock.AcquireRequest{
		{Lock: "x", Owner: "a"},
		{Lock: "s", Owner: "a", Mode: lock.Shared},
		{Lock: "p", Owner: "a", Limit: 2},
	} {
		req.TTL = 50 * time.Millisecond
		if _, err := m.TryAcquire(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	// A fair waiter's place on x, never renewed.
	req := lock.AcquireRequest{Lock: "x", Owner: "b", Fair: true, TTL: time.Minute}
	req.WaiterID = lock.NewWaiterID(req)
	if _, err := m.TryAcquire(ctx, req); lock.ErrorCode(err) != lock.CodeHeld {
		t.Fatalf("fair waiter: %v", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		m.mu.Lock()
		n := len(m.names)
		m.mu.Unlock()
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d names left after their leases and places lapsed", n)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if st, _ := m.Inspect(ctx, "x"); st.LastToken == 0 {
		t.Fatal("the sweeper dropped the fence")
	}
}
