package redis_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/lockapi/lockapi/internal/lock"
	redisstore "github.com/lockapi/lockapi/internal/store/redis"
	"github.com/lockapi/lockapi/internal/testkit/redistest"
)

// Through a planned Sentinel failover (min_replicas 0), the write gate
// refuses writes while the replica is promoted and lets reads go on, and no
// lease acknowledged before or after is lost: each one can be released on
// the new master.
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

	// A churn of acquires and releases on one lock, across the failover.
	stop, done := make(chan struct{}), make(chan struct{})
	var refused, readsWhileRefused, lost int
	// gated counts a write refused by the gate, and reads the lock then.
	gated := func(err error) bool {
		if !errors.Is(err, redisstore.ErrFailover) {
			return false
		}
		refused++
		if _, err := s.Inspect(ctx, "churn"); err == nil {
			readsWhileRefused++
		}
		return true
	}
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			g, err := s.TryAcquire(ctx, lock.AcquireRequest{Lock: "churn", Owner: fmt.Sprint("o", i), TTL: time.Minute})
			if err != nil {
				gated(err)
				time.Sleep(5 * time.Millisecond)
				continue
			}
			// Release what was acknowledged, on whichever master serves.
			for deadline := time.Now().Add(15 * time.Second); ; {
				_, err := s.Release(ctx, lock.LeaseRef{Lock: "churn", ID: g.Lease.ID}, true)
				gated(err)
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
	<-done

	t.Logf("gate closed %d times; %d writes refused, %d reads answered meanwhile, %d leases lost", redisstore.GateCloses(c), refused, readsWhileRefused, lost)
	if redisstore.GateCloses(c) < 1 || refused == 0 {
		t.Errorf("the gate never closed (closes %d, refused writes %d)", redisstore.GateCloses(c), refused)
	}
	if readsWhileRefused == 0 {
		t.Error("no read was answered while writes were refused")
	}
	if lost > 0 {
		t.Errorf("%d acknowledged leases lost in the failover", lost)
	}
	if _, err := s.TryAcquire(ctx, lock.AcquireRequest{Lock: "after", Owner: "o", TTL: time.Minute}); err != nil {
		t.Errorf("acquire after the failover: %v", err)
	}
}
