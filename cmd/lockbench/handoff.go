package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Targets of the handoff mode, with 10 waiters.
const (
	targetHandoffP50     = 1 * time.Millisecond
	targetHandoffP99     = 5 * time.Millisecond
	targetHandoffWaiters = 10
)

// handoffStall is how long the run waits for any grant after a release
// before calling the hand-off lost: with waiters parked, a release must wake
// one of them, and a wake-up that never comes is a bug worth a loud error.
const handoffStall = 10 * time.Second

// handoff is the state the waiters of the handoff mode share. Exactly one of
// them holds the lock at a time, so grants are serialized by the lock
// itself; the mutex is for the Go memory model and the race detector.
type handoff struct {
	base      time.Time    // the monotonic clock every timestamp is taken on
	releaseAt atomic.Int64 // ns since base, just before the holder's DELETE is sent
	warm      int64        // hand-offs not measured (the first of each waiter)
	total     int64        // warm + measured

	mu     sync.Mutex
	grants int64
	lat    hist
	next   chan struct{} // closed at the next grant
}

// granted records a grant that arrived at now (since base) and returns its
// number and a channel that closes at the grant after it.
func (h *handoff) granted(now time.Duration) (int64, <-chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.grants++
	if h.grants > h.warm && h.grants <= h.total {
		h.lat.Record(now - time.Duration(h.releaseAt.Load()))
	}
	close(h.next)
	h.next = make(chan struct{})
	return h.grants, h.next
}

func (h *handoff) count() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.grants
}

// runHandoffKind is the handoff mode, as -kind says.
func runHandoffKind(ctx context.Context, cfg *config, log io.Writer) (*result, error) {
	switch cfg.kind.name {
	case "shared":
		return runSharedHandoff(ctx, cfg, log)
	case "semaphore":
		// One permit, so that every grant waits for a release.
		cfg.kind.limit = 1
	}
	return runHandoff(ctx, cfg, log)
}

// runHandoff measures the hand-offs of a lock: W waiters long-poll it.
// Each, when granted, records the time from just before the previous
// holder's DELETE was sent until its own 201 arrived (one in-process monotonic clock, so no
// clock skew), releases at once, and rejoins the wait once someone else has
// been granted the lock: rejoining earlier could let it win its own release
// back, which measures a plain acquire instead of a hand-off.
func runHandoff(ctx context.Context, cfg *config, log io.Writer) (*result, error) {
	w := cfg.waiters
	if w < 2 {
		return nil, errors.New("handoff needs at least 2 waiters")
	}
	cl, err := cfg.connect(ctx, w+2)
	if err != nil {
		return nil, err
	}
	defer cl.close()
	meter, done := cfg.meter(ctx, log)
	defer done()

	name := cfg.prefix + "handoff"
	holder := cl.newKindSession(acquireBody("lockbench-holder", cfg.ttl, 0, cfg.kind), cfg.kind)
	rep, err := holder.acquire(ctx, name)
	if err != nil {
		return nil, transportError(err)
	}
	if rep.status != http.StatusCreated {
		return nil, statusError("acquire "+name+" (is another lockbench running on it?)", rep)
	}

	h := &handoff{base: time.Now(), warm: int64(w), total: int64(w + cfg.n), next: make(chan struct{})}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg      sync.WaitGroup
		runErr  firstError
		written atomic.Int64
	)
	fail := func(err error) {
		runErr.set(err)
		cancel()
	}
	fmt.Fprintf(log, "lockbench: %d waiters on %s, %d hand-offs (+%d warm-up)\n", w, name, cfg.n, w)
	for i := range w {
		s := cl.newKindSession(acquireBody("lockbench-waiter-"+strconv.Itoa(i), cfg.ttl, cfg.waitMs, cfg.kind), cfg.kind)
		wg.Go(func() {
			wctx := traceFirstWrite(ctx, &written)
			for ctx.Err() == nil {
				rep, err := s.acquire(wctx, name)
				now := time.Since(h.base)
				switch {
				case ctx.Err() != nil:
					return
				case err != nil:
					fail(transportError(err))
					return
				case rep.status == http.StatusConflict:
					continue // the wait ran out: wait again
				case rep.status != http.StatusCreated:
					fail(waiterStatusError("waiting acquire of "+name, rep, w))
					return
				}
				n, next := h.granted(now)
				h.releaseAt.Store(int64(time.Since(h.base)))
				rel, err := s.release(ctx, name, rep.leaseID)
				if err == nil && rel.status != http.StatusOK {
					err = statusError("release "+name, rel)
				}
				if err != nil && ctx.Err() == nil {
					fail(err)
					return
				}
				if n >= h.total {
					cancel() // done: the other waiters stop waiting
					return
				}
				select {
				case <-next:
				case <-ctx.Done():
					return
				}
			}
		})
	}

	// The first hand-off is from the holder, once every waiter waits.
	how, err := waitParked(ctx, holder, w, written.Load, cfg.settle)
	if err != nil {
		cancel()
		wg.Wait()
		if rerr := runErr.get(); rerr != nil {
			return nil, rerr
		}
		return nil, err
	}
	fmt.Fprintf(log, "lockbench: waiters parked (%s); handing off\n", how)
	cpu0 := meter.sample(ctx)
	h.releaseAt.Store(int64(time.Since(h.base)))
	if rel, err := holder.release(ctx, name, rep.leaseID); err != nil || rel.status != http.StatusOK {
		fail(fmt.Errorf("release %s by the first holder: %v %s", name, err, snippet(rel.body)))
	}

	// Watch for progress: a release that wakes nobody is a lost hand-off.
	last, lastAt := int64(-1), time.Now()
	for ctx.Err() == nil {
		sleep(ctx, 50*time.Millisecond)
		if n := h.count(); n != last {
			last, lastAt = n, time.Now()
		} else if time.Since(lastAt) > handoffStall {
			fail(fmt.Errorf("no grant for %v after hand-off %d: a release woke no waiter", handoffStall, n))
		}
	}
	cpu1 := meter.sample(context.Background())
	wg.Wait()
	if err := runErr.get(); err != nil {
		return nil, err
	}
	if err := context.Cause(ctx); h.count() < h.total && err != nil {
		return nil, fmt.Errorf("stopped after %d of %d hand-offs: %w", h.count(), h.total, err)
	}

	r := cfg.newResult()
	r.setInt("waiters", int64(w))
	r.setInt("handoffs", int64(h.lat.Count()))
	r.setFloat("handoffs_per_s", float64(h.lat.Count())/cpu1.at.Sub(cpu0.at).Seconds(), 0)
	r.addLatencies("handoff", &h.lat)
	addCPU(r, cpu0, cpu1)
	na := w != targetHandoffWaiters
	r.targets = append(r.targets,
		target{What: "release-to-next-grant p50", Want: "≤ " + fmtGoal(targetHandoffP50) + " (10 waiters)",
			Got: fmtMs(h.lat.Quantile(0.5)), Pass: h.lat.Quantile(0.5) <= targetHandoffP50, NA: na},
		target{What: "release-to-next-grant p99", Want: "≤ " + fmtGoal(targetHandoffP99) + " (10 waiters)",
			Got: fmtMs(h.lat.Quantile(0.99)), Pass: h.lat.Quantile(0.99) <= targetHandoffP99, NA: na},
	)
	return r, nil
}

// waiterStatusError is statusError with the waiter limits spelled out: 429
// from a waiting acquire means the server caps waiting requests below what
// the run needs.
func waiterStatusError(what string, rep reply, need int) error {
	if rep.status == http.StatusTooManyRequests {
		return fmt.Errorf("%s: HTTP 429: the server refuses more waiting requests (%s). "+
			"Start it with LOCKAPI_MAX_WAITERS and LOCKAPI_MAX_WAITERS_PER_CALLER of at least %d "+
			"(the defaults are 10000 and 500; on an open server all of lockbench's connections are one caller)",
			what, snippet(rep.body), need)
	}
	return statusError(what, rep)
}
