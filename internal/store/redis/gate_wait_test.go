package redis_test

import (
	"context"
	"errors"
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

// A write made while the gate is closed waits for it to open, holding
// neither a batch lane nor a connection (reads are answered meanwhile), and
// then runs on the master the gate opened for: the acquire is granted
// instead of answering unavailable at once.
func TestGate_write_waits_for_the_gate_to_open(t *testing.T) {
	s, gate, addr := gatedStore(t, time.Minute)
	gate.Promoting("127.0.0.1:1") // the master being replaced
	done := make(chan error, 1)
	go func() {
		_, err := s.TryAcquire(ctx, lock.AcquireRequest{Lock: "w", Owner: "a", TTL: time.Minute})
		done <- err
	}()
	for deadline := time.Now().Add(10 * time.Second); gate.Waiting() == 0; {
		select {
		case err := <-done:
			t.Fatalf("the acquire answered %v while the gate was closed; want it to wait for the gate", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the acquire did not reach the gate in 10 s")
		}
		time.Sleep(time.Millisecond)
	}
	// A read goes on, and the waiting write has not run.
	for i := range 3 {
		st, err := s.Inspect(ctx, "w")
		if err != nil || st.Held {
			t.Fatalf("read %d while the write waits: held %v, %v; want free, nil", i, st.Held, err)
		}
	}
	gate.Promoted(addr)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the acquire that waited for the gate: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the acquire did not end 10 s after the gate opened")
	}
	if st, err := s.Inspect(ctx, "w"); err != nil || !st.Held {
		t.Fatalf("after the gate opened: held %v, %v; want held", st.Held, err)
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
