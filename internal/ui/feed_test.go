package ui

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/lockapi/lockapi/internal/store/memory"
)

// feedBound is how long a live feed may take to end once it should:
// generous, far above the check period the tests set.
const feedBound = 10 * time.Second

// openFeed serves GET /ui/events with cookie on d, whose API holds the
// stream open until its request's context ends; it returns when the
// stream is open, and the channel that gets that context's error once the
// feed ends.
func openFeed(t *testing.T, d *dash, cookie string) <-chan error {
	t.Helper()
	opened, ended := make(chan struct{}), make(chan error, 1)
	d.h.api = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(opened)
		<-r.Context().Done()
		ended <- r.Context().Err()
	})
	go serve(d.h, "GET", "/ui/events", cookie, nil)
	select {
	case <-opened:
	case <-time.After(feedBound):
		t.Fatal("the feed did not open")
	}
	return ended
}

func feedEnds(t *testing.T, ended <-chan error, what string) error {
	t.Helper()
	select {
	case err := <-ended:
		return err
	case <-time.After(feedBound):
		t.Fatalf("the live feed goes on %v after %s", feedBound, what)
		return nil
	}
}

// Signing out ends the session's live feed.
func TestEventsStream_ends_at_sign_out(t *testing.T) {
	d := newDash(t, memory.New())
	d.h.feedCheck = 10 * time.Millisecond
	cookie, csrf := d.signIn(t, d.reader)
	ended := openFeed(t, d, cookie)
	if w := serve(d.h, "POST", "/ui/signout", cookie, url.Values{"csrf": {csrf}}); w.Code != http.StatusSeeOther {
		t.Fatalf("sign out: %d", w.Code)
	}
	feedEnds(t, ended, "sign-out")
}

// A session's live feed ends when the session expires.
func TestEventsStream_ends_at_expiry(t *testing.T) {
	d := newDash(t, memory.New())
	k, err := d.keys.Authenticate(d.reader, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	cookie := d.h.seal([]byte("0123456789abcdef"), time.Now().Add(4*time.Second), k) // sealed to the second
	ended := openFeed(t, d, cookie)
	if err := feedEnds(t, ended, "the session's expiry"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("the feed ended with %v, want its deadline", err)
	}
}
