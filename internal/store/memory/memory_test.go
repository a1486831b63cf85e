package memory_test

import (
	"testing"

	"github.com/lockapi/lockapi/internal/lock"
	"github.com/lockapi/lockapi/internal/store/memory"
	"github.com/lockapi/lockapi/internal/testkit/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, storetest.Backend{
		Open:       open,
		Semaphores: true, FairQueues: true, Events: true, Sessions: true, Updates: true,
		LoseData: map[string]func(*testing.T, lock.Store) lock.Store{
			// A memory store loses everything when its process ends; the
			// next process starts from an empty store.
			"process-restart": func(t *testing.T, s lock.Store) lock.Store {
				s.Close()
				return open(t)
			},
		},
	})
}

// open returns an empty memory store, closed with the test.
func open(t *testing.T) lock.Store {
	m := memory.New()
	t.Cleanup(func() { m.Close() })
	return m
}

func BenchmarkStore_AcquireRelease(b *testing.B) {
	s := memory.New()
	defer s.Close()
	storetest.BenchAcquireRelease(b, s)
}
