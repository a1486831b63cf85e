package webhook

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// Webhooks on probation hold at most their share of the slots together,
// and the others still get the rest.
func TestSlots_probation_holds_a_bounded_share(t *testing.T) {
	const max = 8
	s := newSlots(max)
	share := ProbationDeliveries(max)
	if share != 2 {
		t.Fatalf("probation share of %d slots: %d, want 2", max, share)
	}
	ctx := context.Background()
	var releases []func()
	for i := range share {
		r, err := s.take(ctx, "dead-"+string(rune('a'+i))+".invalid", true)
		if err != nil {
			t.Fatal(err)
		}
		releases = append(releases, r)
	}
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	_, err := s.take(short, "dead-z.invalid", true)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a probation attempt beyond the share: %v, want it to wait", err)
	}
	for i := range max - share {
		r, err := s.take(ctx, "live-"+string(rune('a'+i)), false)
		if err != nil {
			t.Fatal(err)
		}
		releases = append(releases, r)
	}
	for _, r := range releases {
		r()
	}
	if len(s.all) != 0 || len(s.probation) != 0 || len(s.hosts) != 0 {
		t.Fatalf("slots left taken: %d, probation %d, hosts %d", len(s.all), len(s.probation), len(s.hosts))
	}
}

// A ping takes none of the background slots, and when it must wait for
// one of its own, its answer comes within its timeout and reports the
// wait.
func TestSender_ping_has_slots_of_its_own(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	t.Cleanup(srv.Close)
	const timeout = 500 * time.Millisecond
	s := newSender(Policy{AllowPrivate: true}, timeout, 1)
	sub := Subscription{ID: "t", URL: srv.URL, Secrets: []string{NewSecret()}}
	ctx := context.Background()

	held, err := s.slots.take(ctx, hostOf(srv.URL), false) // a delivery that hangs
	if err != nil {
		t.Fatal(err)
	}
	defer held()
	if a := s.send(ctx, sub, "1-0", []byte(`{}`), kindPing); !a.OK() {
		t.Fatalf("ping while the delivery slot is held: %+v", a)
	}

	heldPing, err := s.pings.take(ctx, hostOf(srv.URL), false) // a ping that hangs
	if err != nil {
		t.Fatal(err)
	}
	defer heldPing()
	start := time.Now()
	a := s.send(ctx, sub, "1-1", []byte(`{}`), kindPing)
	took := time.Since(start)
	if a.OK() || a.Outcome != OutcomeUnreachable || !errors.Is(a.Err, context.DeadlineExceeded) {
		t.Fatalf("ping with no slot free: %+v", a)
	}
	if a.Duration < timeout || a.Duration > took {
		t.Fatalf("ping with no slot free reported %v; it waited its %v timeout and took %v", a.Duration, timeout, took)
	}
}
