package redis_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/lockapi/lockapi/internal/lock"
	redisstore "github.com/lockapi/lockapi/internal/store/redis"
	"github.com/lockapi/lockapi/internal/testkit/redistest"
	"github.com/lockapi/lockapi/internal/testkit/storetest"
)

// gatedStore is a store on a Redis of its own, batching, with a write gate
// the test drives by hand (HandGate) that gives up after hold. It returns
// the store, the gate and the Redis's address.
func gatedStore(t *testing.T, hold time.Duration) (*redisstore.Store, *redisstore.Gate, string) {
	t.Helper()
	srv := redistest.Start(t)
	s, err := redisstore.New(srv.Client(t), redisstore.Options{Prefix: "gw:" + ulid.Make().String() + ":", Batch: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, redisstore.HandGate(s, hold), srv.Addr
}

// Writes made while the gate is closed wait for it to open, holding neither
// a batch lane nor a connection (more of them wait than a lane has workers,
// and reads are answered meanwhile), and then run on the master the gate
// opened for: the acquires are granted instead of answering unavailable at
// once.
func TestGate_write_waits_for_the_gate_to_open(t *testing.T) {
	const writes = 4 // more than a lane's workers (batchWorkers)
	s, gate, addr := gatedStore(t, time.Minute)
	gate.Promoting("127.0.0.1:1") // the master being replaced
	done := make(chan error, writes)
	for i := range writes {
		go func() {
			_, err := s.TryAcquire(ctx, lock.AcquireRequest{Lock: fmt.Sprint("w", i), Owner: "a", TTL: time.Minute})
			done <- err
		}()
	}
	for deadline := time.Now().Add(10 * time.Second); gate.Waiting() < writes; {
		select {
		case err := <-done:
			t.Fatalf("an acquire answered %v while the gate was closed; want it to wait for the gate", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d acquires reached the gate in 10 s", gate.Waiting(), writes)
		}
		time.Sleep(time.Millisecond)
	}
	// Reads go on, and the waiting writes have not run.
	for i := range writes {
		st, err := s.Inspect(ctx, fmt.Sprint("w", i))
		if err != nil || st.Held {
			t.Fatalf("read of w%d while the writes wait: held %v, %v; want free, nil", i, st.Held, err)
		}
	}
	gate.Promoted(addr)
	for range writes {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("an acquire that waited for the gate: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("an acquire did not end 10 s after the gate opened")
		}
	}
	for i := range writes {
		if st, err := s.Inspect(ctx, fmt.Sprint("w", i)); err != nil || !st.Held {
			t.Fatalf("w%d after the gate opened: held %v, %v; want held", i, st.Held, err)
		}
	}
	if gate.Waiting() != 0 {
		t.Errorf("%d writes still counted waiting", gate.Waiting())
	}
}

// A gate that does not open within its bound (the sentinels' failover-timeout
// plus a margin: hold here) answers the writes that waited for it
// unavailable, not sent; so does one whose caller's deadline comes first.
func TestGate_write_answers_unavailable_when_the_gate_does_not_open(t *testing.T) {
	const hold = 500 * time.Millisecond
	s, gate, _ := gatedStore(t, hold)
	gate.Promoting("127.0.0.1:1")
	start := time.Now()
	_, err := s.TryAcquire(ctx, lock.AcquireRequest{Lock: "n", Owner: "a", TTL: time.Minute})
	took := time.Since(start)
	storetest.WantCode(t, err, lock.CodeUnavailable)
	if !errors.Is(err, redisstore.ErrFailover) {
		t.Errorf("error %v; want the failover's", err)
	}
	if took < hold/2 || took > hold+5*time.Second {
		t.Errorf("answered after %v; want after the gate's bound %v, and soon after", took, hold)
	}
	if st, err := s.Inspect(ctx, "n"); err != nil || st.Held {
		t.Fatalf("after the refused write: held %v, %v; want free: it must not have run", st.Held, err)
	}

	// The caller's deadline, well before the gate's bound.
	gate = redisstore.HandGate(s, time.Minute)
	gate.Promoting("127.0.0.1:1")
	dctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	start = time.Now()
	_, err = s.TryAcquire(dctx, lock.AcquireRequest{Lock: "n", Owner: "b", TTL: time.Minute})
	took = time.Since(start)
	storetest.WantCode(t, err, lock.CodeUnavailable)
	if !errors.Is(err, redisstore.ErrFailover) {
		t.Errorf("error %v; want the failover's", err)
	}
	if took > 10*time.Second {
		t.Errorf("answered after %v; want at the caller's deadline (300 ms), not the gate's bound (1 min)", took)
	}
	if gate.Waiting() != 0 {
		t.Errorf("%d writes still counted waiting", gate.Waiting())
	}
}
