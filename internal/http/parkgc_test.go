package http

import (
	"testing"
	"time"
)

func TestBurstCollector(t *testing.T) {
	t.Run("NoCollectionUnderBurstMin", func(t *testing.T) {
		var b burstCollector
		for range burstMin - 1 {
			b.parked()
		}
		if b.timer != nil {
			t.Fatal("a collection is due after fewer than burstMin parks")
		}
	})

	t.Run("CollectsOnceQuiet", func(t *testing.T) {
		var b burstCollector
		for range burstMin {
			b.parked()
		}
		for deadline := time.Now().Add(burstQuiet + 5*time.Second); ; time.Sleep(10 * time.Millisecond) {
			b.mu.Lock()
			parks := b.parks
			b.mu.Unlock()
			if parks == 0 {
				return // collected, and counting again
			}
			if time.Now().After(deadline) {
				t.Fatalf("no collection after the burst went quiet (%d parks counted)", parks)
			}
		}
	})
}
