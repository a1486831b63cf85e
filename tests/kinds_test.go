package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockapi/lockapi/internal/testkit/fencetest"
	"github.com/lockapi/lockapi/internal/testkit/redistest"
)

// The lock kinds of docs/LOCK_KINDS.md, driven through the real binary on a
// real Redis by concurrent clients. Each test checks the kind's promise from
// the outside: what the clients saw while holding, not what the server says.

// queueLength reads a lock's queue_length.
func queueLength(t *testing.T, a *api, name string) int {
	t.Helper()
	r := a.must("GET", "/v1/locks/"+name, nil)
	var st struct {
		QueueLength int `json:"queue_length"`
	}
	r.decode(t, &st)
	return st.QueueLength
}

// waitQueue waits until name's queue holds n waiters.
func waitQueue(t *testing.T, a *api, name string, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for queueLength(t, a, name) != n {
		if time.Now().After(deadline) {
			t.Fatalf("queue of %s: %d waiters, want %d", name, queueLength(t, a, name), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// fairWaiter sends a fair acquire that waits up to waitMs and returns the
// channel its answer arrives on. A waiter whose server is to be killed
// (doomed) has its transport error ignored.
func fairWaiter(t *testing.T, a *api, name, owner string, waitMs int, doomed ...bool) <-chan response {
	got := make(chan response, 1)
	go func() {
		r, err := a.do(context.Background(), "POST", "/v1/locks/"+name+"/leases",
			map[string]any{"owner": owner, "ttl_ms": holdTTL, "wait_ms": waitMs, "fair": true})
		if err != nil && len(doomed) == 0 {
			t.Errorf("fair waiter %s on %s: %v", owner, name, err)
		}
		got <- r
	}()
	return got
}

// TestE2E_fair_grants_in_arrival_order queues six fair waiters, alternating
// between two lockapi instances, and checks that the lock is granted in the
// order they queued, each with a larger token, while a fenced resource
// accepts every write.
func TestE2E_fair_grants_in_arrival_order(t *testing.T) {
	rs := redistest.Start(t)
	a, b := startPair(t, "single", rs.URL)
	const name, n = "fifo", 6
	holder := a.mustAcquire(name, map[string]any{"owner": "holder", "ttl_ms": holdTTL}, 201)

	type grant struct {
		i     int
		lease Lease
	}
	order := make(chan grant, n)
	var storage fencetest.Resource
	var wg sync.WaitGroup
	defer wg.Wait() // every holder has released before the servers stop
	for i := range n {
		via := []*api{a, b}[i%2]
		got := fairWaiter(t, via, name, fmt.Sprintf("w%d", i), 20000)
		waitQueue(t, a, name, i+1)
		wg.Go(func() {
			r := <-got
			if r.Status != 201 {
				t.Errorf("waiter %d: %d %s", i, r.Status, r.Body)
				order <- grant{i: i}
				return
			}
			var l Lease
			r.decode(t, &l)
			if err := storage.Write(l.FencingToken, l.Owner); err != nil {
				t.Errorf("waiter %d: fenced write refused: %v", i, err)
			}
			order <- grant{i, l}
			time.Sleep(10 * time.Millisecond)
			via.release(l)
		})
	}
	a.release(holder)
	var got []int
	prev := holder.FencingToken
	for range n {
		select {
		case g := <-order:
			got = append(got, g.i)
			if g.lease.FencingToken <= prev {
				t.Errorf("waiter %d: token %d after %d", g.i, g.lease.FencingToken, prev)
			}
			prev = g.lease.FencingToken
		case <-time.After(15 * time.Second):
			t.Fatalf("grants so far %v: the rest never came", got)
		}
	}
	if !slices.Equal(got, []int{0, 1, 2, 3, 4, 5}) {
		t.Fatalf("grant order %v, want arrival order", got)
	}
}

// TestE2E_fair_queue_survives_a_dead_instance kills -9 the lockapi instance
// that holds the first two fair waiters. Their queue places are no longer
// renewed, so the third waiter, on the surviving instance, is granted within
// 2 s of the holder's release: a dead waiter never blocks the queue.
func TestE2E_fair_queue_survives_a_dead_instance(t *testing.T) {
	rs := redistest.Start(t)
	env := []string{"LOCKAPI_REDIS_URL=" + rs.URL}
	doomed := startServer(t, env)
	a, b := newAPI(t, doomed), newAPI(t, startServer(t, env))
	const name = "fair-kill"
	holder := b.mustAcquire(name, map[string]any{"owner": "holder", "ttl_ms": holdTTL}, 201)
	fairWaiter(t, a, name, "dies-1", 30000, true)
	waitQueue(t, b, name, 1)
	fairWaiter(t, a, name, "dies-2", 30000, true)
	waitQueue(t, b, name, 2)
	survivor := fairWaiter(t, b, name, "survivor", 30000)
	waitQueue(t, b, name, 3)

	doomed.killNow()
	released := time.Now()
	b.release(holder)
	select {
	case r := <-survivor:
		took := time.Since(released)
		if r.Status != 201 {
			t.Fatalf("survivor: %d %s", r.Status, r.Body)
		}
		t.Logf("survivor granted %v after the release", took.Round(time.Millisecond))
		if took > 2*time.Second {
			t.Fatalf("survivor granted %v after the release, want within 2s", took)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("survivor not granted 10s after the release: the dead waiters block the queue")
	}
}

// TestE2E_readers_and_writers never lets a writer hold alongside anyone:
// eight clients take one lock in random modes for a few seconds and count,
// while holding, who else holds. Writers write to a fenced resource; readers
// check that their token is above the last writer's.
func TestE2E_readers_and_writers(t *testing.T) {
	s, _ := startOnRedis(t)
	a := newAPI(t, s)
	const name = "rw"
	var (
		readers, writers, maxReaders atomic.Int64
		violations                   atomic.Int64
		lastWriter                   atomic.Uint64
		storage                      fencetest.Resource
		grants                       [2]atomic.Int64
	)
	end := time.Now().Add(3 * time.Second)
	var wg sync.WaitGroup
	for c := range 8 {
		wg.Go(func() {
			for time.Now().Before(end) {
				shared := rand.IntN(4) != 0
				body := map[string]any{"owner": fmt.Sprintf("c%d", c), "ttl_ms": 10000, "wait_ms": 10000}
				if shared {
					body["mode"] = "shared"
				}
				r, err := a.do(context.Background(), "POST", "/v1/locks/"+name+"/leases", body)
				if err != nil || r.Status != 201 {
					t.Errorf("client %d acquire: %v %d %s", c, err, r.Status, r.Body)
					return
				}
				var l Lease
				r.decode(t, &l)
				if shared {
					n := readers.Add(1)
					for m := maxReaders.Load(); n > m && !maxReaders.CompareAndSwap(m, n); m = maxReaders.Load() {
					}
					if writers.Load() != 0 || l.FencingToken <= lastWriter.Load() {
						violations.Add(1)
					}
					grants[0].Add(1)
				} else {
					if writers.Add(1) != 1 || readers.Load() != 0 {
						violations.Add(1)
					}
					lastWriter.Store(l.FencingToken)
					if err := storage.Write(l.FencingToken, l.Owner); err != nil {
						t.Errorf("client %d: fenced write refused: %v", c, err)
					}
					grants[1].Add(1)
				}
				time.Sleep(time.Duration(1+rand.IntN(3)) * time.Millisecond)
				if shared {
					readers.Add(-1)
				} else {
					writers.Add(-1)
				}
				if rel := a.release(l); rel.Status != 200 {
					t.Errorf("client %d release: %d %s", c, rel.Status, rel.Body)
				}
			}
		})
	}
	wg.Wait()
	t.Logf("%d shared and %d exclusive grants; up to %d readers at once", grants[0].Load(), grants[1].Load(), maxReaders.Load())
	if v := violations.Load(); v != 0 {
		t.Fatalf("%d grants overlapped a writer", v)
	}
	if maxReaders.Load() < 2 || grants[1].Load() < 5 {
		t.Fatalf("the run did not exercise both modes: max readers %d, writers %d", maxReaders.Load(), grants[1].Load())
	}
}

// TestE2E_semaphore_never_more_than_limit runs ten clients on a semaphore of
// three permits and counts holders while holding.
func TestE2E_semaphore_never_more_than_limit(t *testing.T) {
	s, _ := startOnRedis(t)
	a := newAPI(t, s)
	const name, limit = "sem", 3
	var holders, most, grants atomic.Int64
	end := time.Now().Add(3 * time.Second)
	var wg sync.WaitGroup
	for c := range 10 {
		wg.Go(func() {
			for time.Now().Before(end) {
				r, err := a.do(context.Background(), "POST", "/v1/locks/"+name+"/leases",
					map[string]any{"owner": fmt.Sprintf("c%d", c), "ttl_ms": 10000, "wait_ms": 10000, "limit": limit})
				if err != nil || r.Status != 201 {
					t.Errorf("client %d acquire: %v %d %s", c, err, r.Status, r.Body)
					return
				}
				var l Lease
				r.decode(t, &l)
				n := holders.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				grants.Add(1)
				time.Sleep(time.Duration(1+rand.IntN(3)) * time.Millisecond)
				holders.Add(-1)
				if rel := a.release(l); rel.Status != 200 {
					t.Errorf("client %d release: %d %s", c, rel.Status, rel.Body)
				}
			}
		})
	}
	wg.Wait()
	t.Logf("%d grants; up to %d holders at once", grants.Load(), most.Load())
	if most.Load() > limit {
		t.Fatalf("%d permit holders at once, limit %d", most.Load(), limit)
	}
	if most.Load() < limit {
		t.Fatalf("never more than %d holders: the test did not fill the semaphore", most.Load())
	}
}

// multiAcquire takes names at once and returns the leases, or the answer.
func multiAcquire(a *api, names []string, owner string, waitMs int) ([]Lease, response, error) {
	r, err := a.do(context.Background(), "POST", "/v1/leases",
		map[string]any{"locks": names, "owner": owner, "ttl_ms": 10000, "wait_ms": waitMs})
	if err != nil || r.Status != 201 {
		return nil, r, err
	}
	var got struct {
		Leases []Lease `json:"leases"`
	}
	if err := json.Unmarshal(r.Body, &got); err != nil {
		return nil, r, err
	}
	return got.Leases, r, nil
}

// multiRelease releases leases with one DELETE /v1/leases.
func multiRelease(a *api, leases []Lease) (response, error) {
	q := url.Values{}
	for _, l := range leases {
		q.Add("id", l.Lock+"/"+l.LeaseID)
	}
	return a.do(context.Background(), "DELETE", "/v1/leases?"+q.Encode(), nil)
}

// TestE2E_multilock_all_or_nothing: a multi-lock that meets one held name
// takes none of the others.
func TestE2E_multilock_all_or_nothing(t *testing.T) {
	s, _ := startOnRedis(t)
	a := newAPI(t, s)
	held := a.mustAcquire("m2", map[string]any{"owner": "other", "ttl_ms": holdTTL}, 201)
	if _, r, err := multiAcquire(a, []string{"m1", "m2", "m3"}, "me", 0); err != nil || r.Status != 409 {
		t.Fatalf("multi-lock over a held name: %v %d %s", err, r.Status, r.Body)
	}
	for _, n := range []string{"m1", "m3"} {
		if st := a.state(n); st.Held {
			t.Fatalf("%s is held after a refused multi-lock: %+v", n, st)
		}
	}
	// Waiting, it gets all three once the held one is released.
	done := make(chan []Lease, 1)
	go func() {
		ls, r, err := multiAcquire(a, []string{"m3", "m1", "m2"}, "me", 10000)
		if err != nil || r.Status != 201 {
			t.Errorf("waiting multi-lock: %v %d %s", err, r.Status, r.Body)
		}
		done <- ls
	}()
	time.Sleep(50 * time.Millisecond)
	for _, n := range []string{"m1", "m3"} {
		if st := a.state(n); st.Held {
			t.Fatalf("%s is held while the multi-lock waits for m2: a partial set", n)
		}
	}
	a.release(held)
	ls := <-done
	if len(ls) != 3 || ls[0].Lock != "m3" || ls[1].Lock != "m1" || ls[2].Lock != "m2" {
		t.Fatalf("leases %+v, want m3, m1, m2 in request order", ls)
	}
	if r, err := multiRelease(a, ls); err != nil || r.Status != 200 {
		t.Fatalf("release: %v %d %s", err, r.Status, r.Body)
	}
	for _, n := range []string{"m1", "m2", "m3"} {
		if st := a.state(n); st.Held {
			t.Fatalf("%s still held after DELETE /v1/leases", n)
		}
	}
}

// TestE2E_multilock_no_deadlock runs eight clients taking random overlapping
// sets of one to five names out of eight for 10 s. Nobody may hold a name
// that another holds, and every client keeps getting its sets: with names
// taken in one order and never held while waiting, there is no deadlock.
func TestE2E_multilock_no_deadlock(t *testing.T) {
	s, _ := startOnRedis(t)
	a := newAPI(t, s)
	pool := []string{"n0", "n1", "n2", "n3", "n4", "n5", "n6", "n7"}
	var occupied [8]atomic.Bool
	var violations, timeouts atomic.Int64
	grants := make([]atomic.Int64, 8)
	end := time.Now().Add(10 * time.Second)
	var wg sync.WaitGroup
	for c := range 8 {
		wg.Go(func() {
			for time.Now().Before(end) {
				idx := rand.Perm(len(pool))[:1+rand.IntN(5)]
				names := make([]string, len(idx))
				for i, j := range idx {
					names[i] = pool[j]
				}
				ls, r, err := multiAcquire(a, names, fmt.Sprintf("c%d", c), 5000)
				if err != nil {
					t.Errorf("client %d: %v", c, err)
					return
				}
				if r.Status == 409 {
					timeouts.Add(1)
					continue
				}
				if r.Status != 201 {
					t.Errorf("client %d: %d %s", c, r.Status, r.Body)
					return
				}
				for _, j := range idx {
					if occupied[j].Swap(true) {
						violations.Add(1)
					}
				}
				grants[c].Add(1)
				time.Sleep(time.Duration(rand.IntN(2)) * time.Millisecond)
				for _, j := range idx {
					occupied[j].Store(false)
				}
				if r, err := multiRelease(a, ls); err != nil || r.Status != 200 {
					t.Errorf("client %d release: %v %d %s", c, err, r.Status, r.Body)
					return
				}
			}
		})
	}
	wg.Wait()
	var total int64
	for c := range grants {
		n := grants[c].Load()
		total += n
		if n == 0 {
			t.Errorf("client %d never got a set in 10s", c)
		}
	}
	t.Logf("%d sets granted, %d waits ran out", total, timeouts.Load())
	if v := violations.Load(); v != 0 {
		t.Fatalf("%d names held by two clients at once", v)
	}
	if timeouts.Load() > total/10 {
		t.Fatalf("%d of %d attempts waited 5s in vain: something stalls", timeouts.Load(), total+timeouts.Load())
	}
}
