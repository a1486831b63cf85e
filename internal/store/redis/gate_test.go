package redis_test

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/lockapi/lockapi/internal/lock"
	redisstore "github.com/lockapi/lockapi/internal/store/redis"
	"github.com/lockapi/lockapi/internal/testkit/redistest"
)

// Through a planned Sentinel failover (min_replicas 0), the write gate
// holds writes while the replica is promoted (they wait, and run on the new
// master) and lets reads go on, and no lease acknowledged before or after is
// lost: each one can be released on the new master. No write is refused.
func TestSentinel_write_gate_in_planned_failover(t *testing.T) {
	sen := redistest.StartSentinel(t)
	c, err := redisstore.NewClient(redisstore.ClientConfig{URL: sen.URL(), Mode: redisstore.ModeSentinel})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	s, err := redisstore.New(c, redisstore.Options{Prefix: "gate:" + ulid.Make().String() + ":", CallTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })

	// A churn of acquires and releases on one lock, across the failover,
	// and a reader that looks at it whenever the gate is closed.
	stop := make(chan struct{})
	var churn, reader sync.WaitGroup
	var refused, lost, unavailable int
	var readsWhileShut, sawWaiting atomic.Int64
	refusal := func(err error) {
		if errors.Is(err, redisstore.ErrFailover) {
			refused++
		}
		if lock.ErrorCode(err) == lock.CodeUnavailable {
			unavailable++
		}
	}
	reader.Add(1)
	go func() {
		defer reader.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if !redisstore.GateShut(c) {
				time.Sleep(time.Millisecond)
				continue
			}
			if redisstore.GateWaiting(c) > 0 {
				sawWaiting.Add(1)
			}
			if _, err := s.Inspect(ctx, "churn"); err == nil {
				readsWhileShut.Add(1)
			}
		}
	}()
	churn.Add(1)
	go func() {
		defer churn.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			g, err := s.TryAcquire(ctx, lock.AcquireRequest{Lock: "churn", Owner: fmt.Sprint("o", i), TTL: time.Minute})
			if err != nil {
				refusal(err)
				time.Sleep(5 * time.Millisecond)
				continue
			}
			// Release what was acknowledged, on whichever master serves.
			for deadline := time.Now().Add(15 * time.Second); ; {
				_, err := s.Release(ctx, lock.LeaseRef{Lock: "churn", ID: g.Lease.ID}, true)
				refusal(err)
				if lock.ErrorCode(err) == lock.CodeLeaseLost {
					lost++
				}
				if err == nil || lock.ErrorCode(err) != lock.CodeUnavailable || time.Now().After(deadline) {
					break
				}
				time.Sleep(5 * time.Millisecond)
			}
		}
	}()
	time.Sleep(200 * time.Millisecond)
	sen.Failover(t)
	time.Sleep(500 * time.Millisecond)
	close(stop)
	churn.Wait()
	reader.Wait()

	t.Logf("gate closed %d times; %d looks saw writes waiting, %d reads answered while it was closed; %d writes refused, %d answered unavailable, %d leases lost",
		redisstore.GateCloses(c), sawWaiting.Load(), readsWhileShut.Load(), refused, unavailable, lost)
	if redisstore.GateCloses(c) < 1 || sawWaiting.Load() == 0 {
		t.Errorf("the gate never held a write (closes %d, looks that saw one waiting %d)", redisstore.GateCloses(c), sawWaiting.Load())
	}
	if readsWhileShut.Load() == 0 {
		t.Error("no read was answered while the gate was closed")
	}
	if refused > 0 {
		t.Errorf("%d writes refused by the gate; want them to wait for the new master", refused)
	}
	if lost > 0 {
		t.Errorf("%d acknowledged leases lost in the failover", lost)
	}
	if _, err := s.TryAcquire(ctx, lock.AcquireRequest{Lock: "after", Owner: "o", TTL: time.Minute}); err != nil {
		t.Errorf("acquire after the failover: %v", err)
	}
}
