package webhook_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockapi/lockapi/internal/webhook"
)

// stuckReceiver answers nothing until it is freed: a receiver that hangs.
// It records how many requests it held at once.
type stuckReceiver struct {
	URL     string
	free    chan struct{}
	freeOne sync.Once
	now     atomic.Int32
	most    atomic.Int32
	served  atomic.Int32
	arrived chan struct{}
}

func newStuckReceiver(t *testing.T) *stuckReceiver {
	r := &stuckReceiver{free: make(chan struct{}), arrived: make(chan struct{}, 100)}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		n := r.now.Add(1)
		defer r.now.Add(-1)
		for m := r.most.Load(); n > m && !r.most.CompareAndSwap(m, n); m = r.most.Load() {
		}
		select {
		case <-r.free:
		case <-req.Context().Done():
			return
		}
		r.served.Add(1)
		w.WriteHeader(http.StatusNoContent)
		r.arrived <- struct{}{}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(r.unstick) // before srv.Close, which waits for the requests
	r.URL = srv.URL
	return r
}

func (r *stuckReceiver) unstick() { r.freeOne.Do(func() { close(r.free) }) }

// A receiver that hangs, however many webhooks name it, holds at most half
// of the delivery slots (one webhook holds one): the other half deliver to
// everyone else meanwhile.
func TestService_a_hanging_receiver_holds_half_the_delivery_slots(t *testing.T) {
	f := newFixture(t, func(c *webhook.Config) {
		c.MaxDeliveries = 4
		c.Timeout = 5 * promptly // the hang outlasts the test's waits
	})
	stuck := newStuckReceiver(t)
	const stuckHooks = 6
	for i := range stuckHooks {
		spec := webhook.Spec{URL: stuck.URL + "/hook/" + string(rune('a'+i)), Prefix: "slots:", Types: []string{"released"}}
		if _, err := f.svc.Create(context.Background(), spec); err != nil {
			t.Fatal(err)
		}
	}
	// The same test server under another host name: another receiver as
	// far as the slots can tell.
	fast := newReceiver(t)
	fast.URL = strings.Replace(fast.URL, "127.0.0.1", "localhost", 1)
	f.subscribe(fast, "slots:", "released")

	f.cycle("slots:a")
	f.cycle("slots:b")
	if got := fast.waitFor(2); got[0].Lock != "slots:a" || got[1].Lock != "slots:b" {
		t.Fatalf("delivered %v while the other receiver hangs", locksOf(got))
	}
	waitUntil(t, func() bool { return stuck.now.Load() == int32(webhook.PerHostDeliveries(4)) })

	stuck.unstick()
	deadline := time.After(promptly)
	for i := range 2 * stuckHooks {
		select {
		case <-stuck.arrived:
		case <-deadline:
			t.Fatalf("the freed receiver got %d of %d deliveries", i, 2*stuckHooks)
		}
	}
	if most, want := stuck.most.Load(), int32(webhook.PerHostDeliveries(4)); most != want {
		t.Fatalf("the hanging receiver held %d requests at once, want %d (half the slots)", most, want)
	}
}
