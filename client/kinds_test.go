package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lockapi/lockapi/client"
	lockhttp "github.com/lockapi/lockapi/internal/http"
)

// The lock kinds through the SDK, on both stores.

func TestAcquire_shared_and_exclusive(t *testing.T) {
	ForEachStore(t, lockhttp.Config{}, func(t *testing.T, e *Env) {
		ctx := context.Background()
		r1 := e.MustAcquire("rw", client.AcquireOptions{Shared: true})
		r2 := e.MustAcquire("rw", client.AcquireOptions{Shared: true})
		if !r1.Shared() || !r2.Shared() || r1.ID() == r2.ID() || r2.Token() <= r1.Token() {
			t.Fatalf("readers: shared %v %v, ids %s %s, tokens %d %d", r1.Shared(), r2.Shared(), r1.ID(), r2.ID(), r1.Token(), r2.Token())
		}
		_, err := e.Client.Acquire(ctx, "rw", client.AcquireOptions{})
		var he *client.HeldError
		if !errors.As(err, &he) || he.Owner != r1.Owner() {
			t.Fatalf("writer while readers hold: %v", err)
		}
		// A writer that waits gets the lock once both readers are gone.
		got := make(chan *client.Lease, 1)
		go func() {
			w, err := e.Client.Acquire(ctx, "rw", client.AcquireOptions{Wait: 10 * time.Second})
			if err != nil {
				t.Error(err)
			}
			got <- w
		}()
		for _, r := range []*client.Lease{r1, r2} {
			if err := r.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
		w := <-got
		if w == nil || w.Shared() || w.Token() <= r2.Token() {
			t.Fatalf("writer: %+v", w)
		}
		_ = w.Release(ctx)
	})
}

func TestAcquire_upgrade_and_limit_mismatch_are_problems(t *testing.T) {
	ForEachStore(t, lockhttp.Config{}, func(t *testing.T, e *Env) {
		ctx := context.Background()
		r := e.MustAcquire("up", client.AcquireOptions{Owner: "me", Shared: true})
		defer r.Release(ctx)
		_, err := e.Client.Acquire(ctx, "up", client.AcquireOptions{Owner: "me", Wait: time.Second})
		var pe *client.ProblemError
		if !errors.As(err, &pe) || pe.Status != 409 || pe.Type != "https://lockapi.dev/problems/upgrade-refused" {
			t.Fatalf("upgrade: %v", err)
		}
		_, err = e.Client.Acquire(ctx, "up", client.AcquireOptions{Limit: 2})
		if !errors.As(err, &pe) || pe.Status != 409 || pe.Type != "https://lockapi.dev/problems/limit-mismatch" {
			t.Fatalf("limit on a lock: %v", err)
		}
	})
}

func TestAcquire_semaphore(t *testing.T) {
	ForEachStore(t, lockhttp.Config{}, func(t *testing.T, e *Env) {
		ctx := context.Background()
		var permits []*client.Lease
		for range 3 {
			p := e.MustAcquire("sem", client.AcquireOptions{Limit: 3})
			if p.Limit() != 3 || p.Shared() {
				t.Fatalf("permit: limit %d shared %v", p.Limit(), p.Shared())
			}
			permits = append(permits, p)
		}
		if _, err := e.Client.Acquire(ctx, "sem", client.AcquireOptions{Limit: 3}); !client.IsHeld(err) {
			t.Fatalf("a fourth permit: %v", err)
		}
		if err := e.Client.ReleaseAll(ctx, permits); err != nil {
			t.Fatal(err)
		}
	})
}

func TestAcquire_fair_queue_refusal_is_held(t *testing.T) {
	ForEachStore(t, lockhttp.Config{}, func(t *testing.T, e *Env) {
		ctx := context.Background()
		holder := e.MustAcquire("fq", client.AcquireOptions{})
		queued := make(chan error, 1)
		go func() {
			l, err := e.Client.Acquire(ctx, "fq", client.AcquireOptions{Fair: true, Wait: 10 * time.Second})
			if err == nil {
				_ = l.Release(ctx)
			}
			queued <- err
		}()
		// Once the fair waiter is queued, a try is refused even after the
		// holder is gone... until the waiter has had its turn.
		deadline := time.Now().Add(5 * time.Second)
		for {
			st, err := e.Client.Inspect(ctx, "fq")
			if err == nil && st.QueueLength == 1 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the fair waiter never queued")
			}
			time.Sleep(5 * time.Millisecond)
		}
		_, err := e.Client.Acquire(ctx, "fq", client.AcquireOptions{})
		var he *client.HeldError
		if !errors.As(err, &he) || he.QueueLength != 1 {
			t.Fatalf("try while a waiter queues: %v", err)
		}
		if err := holder.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-queued; err != nil {
			t.Fatalf("fair waiter: %v", err)
		}
	})
}

func TestAcquireAll(t *testing.T) {
	ForEachStore(t, lockhttp.Config{}, func(t *testing.T, e *Env) {
		ctx := context.Background()
		other := e.MustAcquire("b", client.AcquireOptions{})
		_, err := e.Client.AcquireAll(ctx, []string{"a", "b", "c"}, client.AcquireOptions{})
		var he *client.HeldError
		if !errors.As(err, &he) || he.Lock != "b" {
			t.Fatalf("over a held name: %v", err)
		}
		if owner, _ := e.Holder("a"); owner != "" {
			t.Fatalf("a is held by %q after a refused multi-lock", owner)
		}
		got := make(chan []*client.Lease, 1)
		go func() {
			ls, err := e.Client.AcquireAll(ctx, []string{"c", "a", "b"}, client.AcquireOptions{Wait: 10 * time.Second})
			if err != nil {
				t.Error(err)
			}
			got <- ls
		}()
		time.Sleep(20 * time.Millisecond)
		_ = other.Release(ctx)
		ls := <-got
		if len(ls) != 3 || ls[0].Name() != "c" || ls[1].Name() != "a" || ls[2].Name() != "b" {
			t.Fatalf("leases %v", ls)
		}
		if err := e.Client.ReleaseAll(ctx, ls); err != nil {
			t.Fatal(err)
		}
		if owner, _ := e.Holder("b"); owner != "" {
			t.Fatalf("b still held by %q", owner)
		}
		if _, err := e.Client.AcquireAll(ctx, []string{"x"}, client.AcquireOptions{Fair: true}); err == nil {
			t.Fatal("Fair on a multi-lock: no error")
		}
	})
}
