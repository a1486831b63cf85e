package http

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
)

func TestNewRequestID_is_an_ordered_ulid(t *testing.T) {
	const workers, each = 8, 2000
	ids := make([][]string, workers)
	before := ulid.Timestamp(time.Now())
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for range each {
				ids[w] = append(ids[w], newRequestID())
			}
		})
	}
	wg.Wait()
	after := ulid.Timestamp(time.Now())

	var all []string
	for _, own := range ids {
		// Each goroutine's ids come in the order it made them.
		if !slices.IsSorted(own) {
			t.Fatal("a goroutine's ids are out of order")
		}
		for _, id := range own {
			u, err := ulid.ParseStrict(id)
			if err != nil {
				t.Fatalf("%q: %v", id, err)
			}
			// 16,000 ids may run the clock a little ahead, no more.
			if ms := u.Time(); ms < before || ms > after+1 {
				t.Fatalf("%q: time %d not within [%d, %d]", id, ms, before, after)
			}
		}
		all = append(all, own...)
	}
	slices.Sort(all)
	if len(slices.Compact(all)) != workers*each {
		t.Fatal("two ids are the same")
	}
}
