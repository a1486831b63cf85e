package http

import (
	"runtime/debug"
	"sync"
	"time"
)

// A burst of parked requests leaves the garbage of its requests (their
// stacks, buffers and parsing) behind, and no allocation comes to collect
// it: the waiters sleep. The heap goal and the process's memory stay what
// the last collection, in the middle of the burst, allowed, until Go's
// two-minute forced collection. So once a burst of at least burstMin parks
// has been quiet for burstQuiet, the server collects and returns the freed
// memory at once.
const (
	burstMin   = 1000
	burstQuiet = time.Second
)

// burstCollector collects after a burst of parks.
type burstCollector struct {
	mu    sync.Mutex
	parks int // since the last collection
	timer *time.Timer
}

// parked counts one more parked request.
func (b *burstCollector) parked() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.parks++; b.parks < burstMin {
		return
	}
	if b.timer == nil {
		b.timer = time.AfterFunc(burstQuiet, b.collect)
	} else {
		b.timer.Reset(burstQuiet)
	}
}

func (b *burstCollector) collect() {
	b.mu.Lock()
	b.parks = 0
	b.mu.Unlock()
	debug.FreeOSMemory()
}
