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

// runSharedHandoff is the handoff mode with -kind shared: the hand-off of a
// read-write lock from a writer to its waiting readers. Each round a writer
// takes the lock exclusively, W readers wait for it in shared mode, and the
// writer releases: every reader's grant is one sample, from just before the
// writer's DELETE to its 201. The readers release at once, and the writer
// takes the lock again for the next round. Rounds run until N samples.
func runSharedHandoff(ctx context.Context, cfg *config, log io.Writer) (*result, error) {
	w := cfg.waiters
	if w < 1 {
		return nil, errors.New("handoff -kind shared needs at least 1 waiter")
	}
	cl, err := cfg.connect(ctx, w+2)
	if err != nil {
		return nil, err
	}
	defer cl.close()
	meter, done := cfg.meter(ctx, log)
	defer done()

	name := cfg.prefix + "handoff-shared"
	writer := cl.newSession(acquireBody("lockbench-writer", cfg.ttl, cfg.waitMs, lockKind{}))
	readers := make([]*session, w)
	for i := range readers {
		readers[i] = cl.newKindSession(acquireBody("lockbench-reader-"+strconv.Itoa(i), cfg.ttl, cfg.waitMs, cfg.kind), cfg.kind)
	}
	rounds := (cfg.n + w - 1) / w
	fmt.Fprintf(log, "lockbench: %d readers on %s, %d rounds (+1 warm-up)\n", w, name, rounds)

	var lat hist
	var cpu0 cpuSample
	for round := 0; round <= rounds && ctx.Err() == nil; round++ {
		if round == 1 {
			cpu0 = meter.sample(ctx)
		}
		wrep, err := writer.acquire(ctx, name)
		if err != nil {
			return nil, transportError(err)
		}
		if wrep.status != http.StatusCreated {
			return nil, statusError("writer acquire of "+name, wrep)
		}
		var (
			wg        sync.WaitGroup
			written   atomic.Int64
			runErr    firstError
			releaseAt atomic.Int64
			mu        sync.Mutex
			samples   []time.Duration
		)
		base := time.Now()
		for _, s := range readers {
			wg.Go(func() {
				rep, err := s.acquire(traceFirstWrite(ctx, &written), name)
				at := time.Since(base)
				if err == nil && rep.status != http.StatusCreated {
					err = waiterStatusError("reader acquire of "+name, rep, w)
				}
				if err != nil {
					runErr.set(err)
					return
				}
				mu.Lock()
				samples = append(samples, at-time.Duration(releaseAt.Load()))
				mu.Unlock()
				if rel, err := s.release(ctx, name, rep.leaseID); err != nil || rel.status != http.StatusOK {
					runErr.set(fmt.Errorf("reader release of %s: %v %s", name, err, snippet(rel.body)))
				}
			})
		}
		if _, err := waitParked(ctx, writer, w, written.Load, cfg.settle); err != nil {
			return nil, err
		}
		releaseAt.Store(int64(time.Since(base)))
		if rel, err := writer.release(ctx, name, wrep.leaseID); err != nil || rel.status != http.StatusOK {
			return nil, fmt.Errorf("writer release of %s: %v %s", name, err, snippet(rel.body))
		}
		wg.Wait()
		if err := runErr.get(); err != nil {
			return nil, err
		}
		if round > 0 { // the first round warms up
			for _, d := range samples {
				lat.Record(d)
			}
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	cpu1 := meter.sample(context.Background())

	r := cfg.newResult()
	r.setInt("waiters", int64(w))
	r.setInt("handoffs", int64(lat.Count()))
	r.addLatencies("handoff", &lat)
	addCPU(r, cpu0, cpu1)
	return r, nil
}
