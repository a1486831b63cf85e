package lock_test

import (
	"testing"

	"github.com/lockapi/lockapi/internal/lock"
)

func TestStableWaiterID(t *testing.T) {
	req := lock.AcquireRequest{Lock: "l", Owner: "o", IdempotencyKey: "k", Fair: true, Mode: lock.Shared}
	a, b := lock.StableWaiterID(req), lock.StableWaiterID(req)
	if a != b || len(a) != len(lock.NewWaiterID(req)) {
		t.Fatalf("ids %q, %q: want equal and as long as a fresh one", a, b)
	}
	if fair, shared, ok := lock.WaiterFlags(a); !fair || !shared || !ok {
		t.Fatalf("flags of %q: fair %v shared %v ok %v", a, fair, shared, ok)
	}
	req.IdempotencyKey = "k2"
	if lock.StableWaiterID(req) == a {
		t.Fatal("another key gave the same id")
	}
}
