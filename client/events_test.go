package client_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockapi/lockapi/client"
	"github.com/lockapi/lockapi/event"
	lockhttp "github.com/lockapi/lockapi/internal/http"
	"github.com/lockapi/lockapi/internal/lock"
)

// collect runs c.Events and sends what it yields on a channel, until the
// test ends.
func collect(t *testing.T, c *client.Client, opts client.EventsOptions) <-chan eventOrError {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	out := make(chan eventOrError, 1024)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(out)
		for ev, err := range c.Events(ctx, opts) {
			out <- eventOrError{ev, err}
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return out
}

type eventOrError struct {
	client.Event
	err error
}

func nextEvent(t *testing.T, ch <-chan eventOrError) client.Event {
	t.Helper()
	select {
	case e, ok := <-ch:
		if !ok {
			t.Fatal("the sequence ended")
		}
		if e.err != nil {
			t.Fatalf("events: %v", e.err)
		}
		return e.Event
	case <-time.After(promptly):
		t.Fatalf("no event after %v", promptly)
	}
	return client.Event{}
}

func nextError(t *testing.T, ch <-chan eventOrError) error {
	t.Helper()
	select {
	case e, ok := <-ch:
		if !ok {
			t.Fatal("the sequence ended without an error")
		}
		if e.err == nil {
			t.Fatalf("event %+v, want an error", e.Event)
		}
		if _, more := <-ch; more {
			t.Error("the sequence goes on after the error")
		}
		return e.err
	case <-time.After(promptly):
		t.Fatalf("no error after %v", promptly)
	}
	return nil
}

// scripted is a stand-in server whose answers to GET /v1/events the test
// writes, one func per request in turn.
type scripted struct {
	t       *testing.T
	mu      sync.Mutex
	answers []func(w http.ResponseWriter, r *http.Request)
	reqs    []*http.Request
}

func (s *scripted) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	n := len(s.reqs)
	s.reqs = append(s.reqs, r)
	s.mu.Unlock()
	if n >= len(s.answers) {
		s.t.Errorf("request %d: %s %s, want none", n+1, r.Method, r.URL)
		w.WriteHeader(http.StatusTeapot)
		return
	}
	s.answers[n](w, r)
}

func (s *scripted) requests() []*http.Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.reqs)
}

func startScripted(t *testing.T, answers ...func(w http.ResponseWriter, r *http.Request)) (*scripted, *client.Client) {
	t.Helper()
	s := &scripted{t: t, answers: answers}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	c, err := client.New(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	return s, c
}

// sse answers a stream with frames, written and flushed one by one, then
// holds it open for hold, or ends it at once.
func sse(hold time.Duration, frames ...string) func(w http.ResponseWriter, r *http.Request) {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for _, f := range frames {
			fmt.Fprint(w, f)
			w.(http.Flusher).Flush()
		}
		select {
		case <-time.After(hold):
		case <-r.Context().Done():
		}
	}
}

func frame(id, typ, lockName string) string {
	return fmt.Sprintf("id: %s\nevent: %s\ndata: {\"id\":%q,\"type\":%q,\"lock\":%q,\"owner\":\"o\",\"principal\":\"\",\"mode\":\"shared\",\"fencing_token\":7,\"hold_count\":1,\"queue_length\":2,\"time\":\"2026-11-23T17:00:00.000Z\"}\n\n", id, typ, id, typ, lockName)
}

func problem(status int, slug string) func(w http.ResponseWriter, r *http.Request) {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(status)
		fmt.Fprintf(w, `{"type":"https://lockapi.dev/problems/%s","title":"t","status":%d,"detail":"d"}`, slug, status)
	}
}

// Events resumes after the last event it yielded whenever the stream ends,
// breaks, fails in a way that may pass or stays silent, and stops at an
// answer that will not pass.
func TestEvents_Reconnects(t *testing.T) {
	client.SetEventsTiming(t, 10*time.Millisecond, 300*time.Millisecond)
	s, c := startScripted(t,
		sse(0, frame("1-0", "granted", "deploy:a"), ": keep-alive\n\n", frame("1-1", "released", "deploy:a")), // ends
		problem(http.StatusServiceUnavailable, "unavailable"),
		sse(time.Minute, frame("1-2", "granted", "deploy:b")), // then silent
		problem(http.StatusGone, "events-gone"),
	)
	ch := collect(t, c, client.EventsOptions{Prefix: "deploy:", Types: []client.EventType{client.EventGranted, client.EventReleased}})
	for _, want := range []string{"1-0", "1-1", "1-2"} {
		if ev := nextEvent(t, ch); ev.ID != want {
			t.Fatalf("event %s, want %s", ev.ID, want)
		}
	}
	err := nextError(t, ch)
	if pe, ok := errors.AsType[*client.ProblemError](err); !ok || pe.Status != http.StatusGone || pe.Type != "https://lockapi.dev/problems/events-gone" {
		t.Fatalf("error %v, want the 410 events-gone problem", err)
	}

	reqs := s.requests()
	var resumed []string
	for _, r := range reqs {
		resumed = append(resumed, r.Header.Get("Last-Event-ID"))
		if q := r.URL.Query(); q.Get("prefix") != "deploy:" || q.Get("types") != "granted,released" || q.Has("lock") {
			t.Errorf("query %s", r.URL.RawQuery)
		}
	}
	if want := []string{"", "1-1", "1-1", "1-2"}; !slices.Equal(resumed, want) {
		t.Errorf("Last-Event-ID of the requests: %q, want %q", resumed, want)
	}
}

func TestEvents_Decodes(t *testing.T) {
	_, c := startScripted(t, sse(time.Minute, frame("1-0", "granted", "a")))
	ev := nextEvent(t, collect(t, c, client.EventsOptions{}))
	queue := 2
	want := client.Event{
		ID: "1-0", Type: client.EventGranted, Lock: "a", Owner: "o", Mode: event.Shared, FencingToken: 7, HoldCount: 1, QueueLength: &queue,
		Time: time.Date(2026, 11, 23, 17, 0, 0, 0, time.UTC),
	}
	if !ev.Time.Equal(want.Time) {
		t.Errorf("time %v, want %v", ev.Time, want.Time)
	}
	ev.Time = want.Time
	if ev.QueueLength == nil || *ev.QueueLength != 2 {
		t.Errorf("queue length %v, want 2", ev.QueueLength)
	}
	ev.QueueLength = want.QueueLength
	if !reflect.DeepEqual(ev, want) {
		t.Errorf("event %+v, want %+v", ev, want)
	}
}

// The first request's failure ends the sequence at once: there is no
// stream to resume yet.
func TestEvents_FirstRequestFails(t *testing.T) {
	t.Run("Unreachable", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		url := "http://" + ln.Addr().String()
		ln.Close()
		c, err := client.New(url)
		if err != nil {
			t.Fatal(err)
		}
		if err := nextError(t, collect(t, c, client.EventsOptions{})); !errors.Is(err, client.ErrUnavailable) {
			t.Errorf("error %v, want ErrUnavailable", err)
		}
	})
	for _, c := range []struct {
		status int
		slug   string
	}{{400, "invalid-request"}, {403, "forbidden"}, {410, "events-gone"}, {501, "events-disabled"}, {503, "unavailable"}} {
		t.Run(c.slug, func(t *testing.T) {
			_, cl := startScripted(t, problem(c.status, c.slug))
			err := nextError(t, collect(t, cl, client.EventsOptions{After: "5-0"}))
			if pe, ok := errors.AsType[*client.ProblemError](err); !ok || pe.Status != c.status {
				t.Errorf("error %v, want a %d problem", err, c.status)
			}
		})
	}
	t.Run("NotAStream", func(t *testing.T) {
		_, cl := startScripted(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/html")
			fmt.Fprint(w, "<html>proxy login</html>")
		})
		if err := nextError(t, collect(t, cl, client.EventsOptions{})); errors.Is(err, client.ErrUnavailable) {
			t.Errorf("error %v, want a final one", err)
		}
	})
}

// Breaking the loop ends the request.
func TestEvents_Break(t *testing.T) {
	gone := make(chan struct{})
	_, c := startScripted(t, func(w http.ResponseWriter, r *http.Request) {
		sse(0, frame("1-0", "granted", "a"))(w, r)
		<-r.Context().Done()
		close(gone)
	})
	for range c.Events(context.Background(), client.EventsOptions{}) {
		break
	}
	select {
	case <-gone:
	case <-time.After(promptly):
		t.Fatal("the request goes on after the loop stopped")
	}
}

// Against a real server: the events of the SDK's own acquires, and a
// server restart that the loop does not notice but for the pause.
func TestEvents_Server(t *testing.T) {
	client.SetEventsTiming(t, 20*time.Millisecond, time.Minute)
	ForEachStore(t, lockhttp.Config{}, testEventsServer)
}

func testEventsServer(t *testing.T, e *Env) {
	log := e.Store.Events()
	c, err := client.New(e.URL) // not the recording client: it reads whole bodies
	if err != nil {
		t.Fatal(err)
	}
	// The loop resumes after an event of its own, rather than starting with
	// the next, which could come before its request reaches the server.
	if _, err := e.Store.TryAcquire(context.Background(), lock.AcquireRequest{Lock: "start", Owner: "x", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	start, err := log.LastEventID(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	ch := collect(t, c, client.EventsOptions{Prefix: "job:", After: start})

	l := e.MustAcquire("job:1", client.AcquireOptions{Owner: "w", TTL: time.Minute, Shared: true})
	ev := nextEvent(t, ch)
	if ev.Type != client.EventGranted || ev.Lock != "job:1" || ev.Owner != "w" || ev.Mode != event.Shared || ev.FencingToken != l.Token() || ev.LeaseID != l.ID() {
		t.Fatalf("event %+v, want the grant of %s token %d", ev, l.ID(), l.Token())
	}
	seen := []string{ev.ID}

	// Changes while the server is down reach the loop once it is back.
	e.Stop()
	for i := range 3 {
		if _, err := e.Store.TryAcquire(context.Background(), lock.AcquireRequest{Lock: fmt.Sprint("job:", i+2), Owner: "x", TTL: time.Minute}); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(50 * time.Millisecond) // a failed reconnect or two
	e.Resume()
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	for range 4 {
		seen = append(seen, nextEvent(t, ch).ID)
	}
	all, err := log.ReadEvents(context.Background(), "", 100)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, ev := range all {
		if strings.HasPrefix(ev.Lock, "job:") {
			want = append(want, ev.ID)
		}
	}
	if !slices.Equal(seen, want) {
		t.Errorf("saw %v, the log has %v", seen, want)
	}
}
