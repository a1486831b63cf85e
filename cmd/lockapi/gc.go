package main

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
)

// GOGC's bounds: collecting less often buys throughput while the heap is
// small, and costs memory once it is not.
const (
	// gcPercentSmall is GOGC while the heap is small: its garbage is
	// short-lived, and five times a small heap is a few MB.
	gcPercentSmall = 400
	// gcPercentLarge is GOGC's floor, Go's default.
	gcPercentLarge = 100
	// gcMaxGarbage is the garbage a collection may wait for, between the
	// two: a heap that has grown live (10,000 parked waiters hold about
	// 25 MB) is not allowed four times itself again before a collection,
	// which the process would keep as RSS.
	gcMaxGarbage = 32 << 20
)

// tuneGC sets GOGC after every collection so that the heap may grow by
// gcMaxGarbage before the next, within gcPercentLarge and gcPercentSmall.
func tuneGC() {
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	percent := gcPercentSmall
	debug.SetGCPercent(percent)
	var arm func()
	arm = func() {
		// A finalizer of an object nothing keeps runs after each
		// collection.
		runtime.SetFinalizer(&gcSentinel{}, func(*gcSentinel) {
			metrics.Read(sample)
			if p := gcPercent(sample[0].Value.Uint64()); p != percent {
				percent = p
				debug.SetGCPercent(p)
			}
			arm()
		})
	}
	arm()
}

// gcSentinel is large enough to have an allocation of its own (the
// runtime batches tiny objects, whose finalizers may never run).
type gcSentinel struct{ _ [32]byte }

// gcPercent is the GOGC that lets a heap of live bytes grow by
// gcMaxGarbage, within the bounds.
func gcPercent(live uint64) int {
	if live == 0 {
		return gcPercentSmall
	}
	return int(max(min(100*gcMaxGarbage/live, gcPercentSmall), gcPercentLarge))
}
