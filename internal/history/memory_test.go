package history

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/lockapi/lockapi/internal/lock"
)

// BenchmarkWindow_memory measures the heap a window takes for 100,000
// distinct lock names in an hour (docs/PERFORMANCE.md, "Lock history"):
// each name granted and released leases times, spread over the hour, by
// owners and principals of realistic length. Run it with
//
//	go test -run '^$' -bench Window_memory -benchtime 1x ./internal/history/
func BenchmarkWindow_memory(b *testing.B) {
	for _, leases := range []int{1, 10, 100} {
		b.Run(fmt.Sprintf("names=100000/leases=%d", leases), func(b *testing.B) {
			for range b.N {
				names := 100_000
				if leases == 100 {
					names = 10_000 // 100 leases of 100,000 names: ten times this
				}
				perName := measure(b, names, leases)
				b.ReportMetric(perName, "B/name")
				b.ReportMetric(perName*100_000/(1<<20), "MiB/100k-names")
			}
		})
	}
}

// measure fills a window with leases leases of each of names names over an
// hour, and returns the heap it holds per name.
func measure(b *testing.B, names, leases int) float64 {
	now := time.Now()
	start := now.Add(-59 * time.Minute)
	step := 59 * time.Minute / time.Duration(names*leases)
	before := heap()
	w := New(Options{Now: func() time.Time { return now }})
	at := start
	for l := range leases {
		for n := range names {
			name := fmt.Sprintf("service-%d:job-%06d", n%50, n)
			owner := fmt.Sprintf("worker-%04d-%d", n%1000, l)
			tok := uint64(l + 1)
			w.Add(lock.Event{Type: lock.EventGranted, Lock: name, Owner: owner, Principal: "team-" + fmt.Sprint(n%20),
				Mode: lock.Exclusive, Token: tok, HoldCount: 1, Queue: 0, Time: at})
			w.Add(lock.Event{Type: lock.EventReleased, Lock: name, Owner: owner, Principal: "team-" + fmt.Sprint(n%20),
				Mode: lock.Exclusive, Token: tok, Queue: 0, Time: at.Add(step / 2)})
			at = at.Add(step)
		}
	}
	after := heap()
	if w.Len() != names {
		b.Fatalf("%d names tracked, want %d", w.Len(), names)
	}
	runtime.KeepAlive(w)
	return float64(after-before) / float64(names)
}

func heap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
