package eventfeed_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/lockapi/lockapi/internal/eventfeed"
	"github.com/lockapi/lockapi/internal/lock"
	"github.com/lockapi/lockapi/internal/store/memory"
	redisstore "github.com/lockapi/lockapi/internal/store/redis"
	"github.com/lockapi/lockapi/internal/testkit/redistest"
)

// promptly bounds what should happen "at once": generous, so that a loaded
// CI machine does not flake.
const promptly = 10 * time.Second

func mustOpenFeed(t *testing.T, log lock.EventLog, opts eventfeed.Options) *eventfeed.Feed {
	t.Helper()
	f := eventfeed.New(log, opts)
	t.Cleanup(f.Close)
	return f
}

func mustSubscribe(t *testing.T, f *eventfeed.Feed, after string, filter lock.EventFilter) *eventfeed.Subscription {
	t.Helper()
	s, err := f.Subscribe(t.Context(), after, filter)
	if err != nil {
		t.Fatalf("subscribe after %q: %v", after, err)
	}
	t.Cleanup(s.Close)
	return s
}

// next returns the subscription's next event, failing the test when none
// comes promptly.
func next(tb testing.TB, s *eventfeed.Subscription) lock.Event {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), promptly)
	defer cancel()
	e, err := s.Next(ctx)
	if err != nil {
		tb.Fatalf("next: %v", err)
	}
	return e
}

// next1 is Next that waits promptly at most.
func next1(s *eventfeed.Subscription) (lock.Event, error) {
	ctx, cancel := context.WithTimeout(context.Background(), promptly)
	defer cancel()
	return s.Next(ctx)
}

// nothingWithin fails the test if the subscription returns an event within d.
func nothingWithin(t *testing.T, s *eventfeed.Subscription, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	if e, err := s.Next(ctx); err == nil {
		t.Fatalf("got %+v, want nothing", e)
	} else if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("next: %v, want the deadline", err)
	}
}

func ids(evs []lock.Event) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.ID
	}
	return out
}

// after returns the events of evs after the id after.
func after(evs []lock.Event, id string) []lock.Event {
	i := slices.IndexFunc(evs, func(e lock.Event) bool { return lock.CompareEventIDs(e.ID, id) > 0 })
	if i < 0 {
		return nil
	}
	return evs[i:]
}

func TestFeed_FromNow(t *testing.T) {
	log := newTestLog()
	log.Append(lock.EventGranted, "before")
	f := mustOpenFeed(t, log, eventfeed.Options{})
	s := mustSubscribe(t, f, "", lock.EventFilter{})
	nothingWithin(t, s, 50*time.Millisecond)

	var want []lock.Event
	for i := range 5 {
		want = append(want, log.Append(lock.EventGranted, fmt.Sprint("l", i)))
	}
	for _, w := range want {
		if got := next(t, s); got.ID != w.ID || got.Lock != w.Lock {
			t.Fatalf("got %s %s, want %s %s", got.ID, got.Lock, w.ID, w.Lock)
		}
	}
	nothingWithin(t, s, 50*time.Millisecond)
}

func TestFeed_EmptyLog(t *testing.T) {
	log := newTestLog()
	f := mustOpenFeed(t, log, eventfeed.Options{})
	s := mustSubscribe(t, f, "", lock.EventFilter{})
	e := log.Append(lock.EventGranted, "a")
	if got := next(t, s); got.ID != e.ID {
		t.Fatalf("got %s, want %s", got.ID, e.ID)
	}
}

func TestFeed_Resume(t *testing.T) {
	log := newTestLog()
	var old []lock.Event
	for range 10 {
		old = append(old, log.Append(lock.EventGranted, "a"))
	}
	f := mustOpenFeed(t, log, eventfeed.Options{Page: 3})
	s := mustSubscribe(t, f, old[3].ID, lock.EventFilter{})
	newer := log.Append(lock.EventReleased, "a")
	for _, w := range append(old[4:], newer) {
		if got := next(t, s); got.ID != w.ID {
			t.Fatalf("got %s, want %s", got.ID, w.ID)
		}
	}
	nothingWithin(t, s, 50*time.Millisecond)

	t.Run("AtTheEnd", func(t *testing.T) {
		s := mustSubscribe(t, f, newer.ID, lock.EventFilter{})
		nothingWithin(t, s, 20*time.Millisecond)
		e := log.Append(lock.EventGranted, "b")
		if got := next(t, s); got.ID != e.ID {
			t.Fatalf("got %s, want %s", got.ID, e.ID)
		}
	})
}

// Subscribers that resume from any point while events are being recorded,
// and some of which read too slowly for their small live buffer, each get
// exactly the log after their resume point: no gap, no duplicate, in order.
func TestFeed_HandOver_NoGapNoDuplicate(t *testing.T) {
	t.Run("TestLog", func(t *testing.T) {
		log := newTestLog()
		testHandOver(t, log, func(i int) { log.Append(lock.EventGranted, fmt.Sprint("l", i%7)) }, log.All)
	})
	t.Run("MemoryStore", func(t *testing.T) {
		mem := memory.New()
		t.Cleanup(func() { _ = mem.Close() })
		testHandOver(t, mem, storeRecorder(t, mem), storeReader(t, mem))
	})
	t.Run("Redis", func(t *testing.T) {
		rs := redistest.Start(t)
		rdb, err := redisstore.NewClient(redisstore.ClientConfig{URL: rs.URL})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = rdb.Close() })
		st, err := redisstore.New(rdb, redisstore.Options{Prefix: "eventstest:", Events: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close() })
		testHandOver(t, st.Events(), storeRecorder(t, st), storeReader(t, st.Events()))
	})
}

// storeRecorder records two events of a lock of st: a grant and a release.
func storeRecorder(t *testing.T, st lock.Store) func(i int) {
	return func(i int) {
		ctx := context.Background()
		g, err := st.TryAcquire(ctx, lock.AcquireRequest{Lock: fmt.Sprint("l", i%7), Owner: "o", TTL: time.Minute})
		if err != nil {
			t.Errorf("acquire: %v", err)
			return
		}
		if _, err := st.Release(ctx, lock.LeaseRef{Lock: g.Lease.Lock, ID: g.Lease.ID}, true); err != nil {
			t.Errorf("release: %v", err)
		}
	}
}

// storeReader reads the whole event log of st.
func storeReader(t *testing.T, log lock.EventLog) func() []lock.Event {
	return func() []lock.Event {
		var out []lock.Event
		for {
			after := ""
			if len(out) > 0 {
				after = out[len(out)-1].ID
			}
			page, err := log.ReadEvents(context.Background(), after, 1000)
			if err != nil {
				t.Errorf("read the log: %v", err) // not Fatal: subscribers call it too
				return out
			}
			if len(page) == 0 {
				return out
			}
			out = append(out, page...)
		}
	}
}

// testHandOver runs the hand-over test on log, which record(i) adds one or
// more events to and all reads whole.
//
// It assumes nothing of the machine's speed: a subscriber reads until it has
// returned the log's last event, however long the feed takes to bring it
// (promptly at most from one event to the next), and the writer records its
// last events only once every subscriber has subscribed, so that each,
// even one from now, has events to get.
func testHandOver(t *testing.T, log lock.EventLog, record func(i int), all func() []lock.Event) {
	for i := range 50 {
		record(i)
	}
	f := mustOpenFeed(t, log, eventfeed.Options{Buffer: 4, Page: 3})

	const (
		total       = 2000
		subscribers = 24
		// tail is how many of the writer's records wait for every
		// subscriber to have subscribed.
		tail = 50
	)
	var subscribed sync.WaitGroup
	subscribed.Add(subscribers)
	// writing ends when the writer is done; last is then the log's last
	// event.
	writing, doneWriting := context.WithCancel(context.Background())
	var last string
	go func() {
		defer doneWriting()
		for i := range total {
			if i == total-tail {
				subscribed.Wait()
			}
			record(i)
			if i%50 == 0 {
				time.Sleep(time.Millisecond) // let the subscribers in among the writes
			}
		}
		if evs := all(); len(evs) > 0 {
			last = evs[len(evs)-1].ID
		}
	}()

	type result struct {
		ok    bool   // it subscribed and read to the log's last event
		after string // "" when subscribed from now
		mark  string // the log's last event once it had subscribed
		got   []lock.Event
	}
	results := make([]result, subscribers)
	var wg sync.WaitGroup
	for i := range results {
		wg.Go(func() {
			time.Sleep(time.Duration(rand.IntN(30)) * time.Millisecond) // spread the subscriptions among the writes
			var r result
			if evs := all(); i%4 != 0 && len(evs) > 0 { // a quarter subscribe from now
				r.after = evs[rand.IntN(len(evs))].ID
			}
			s, err := f.Subscribe(context.Background(), r.after, lock.EventFilter{})
			if err == nil {
				defer s.Close()
				r.mark, err = log.LastEventID(context.Background())
			}
			subscribed.Done()
			if err != nil {
				t.Errorf("subscriber %d after %q: subscribe: %v", i, r.after, err)
				return
			}
			slow := i%3 == 0
			take := func(e lock.Event) {
				r.got = append(r.got, e)
				if slow && rand.IntN(20) == 0 {
					time.Sleep(time.Millisecond)
				}
			}
			// While the writer writes, take what comes. Whether Next
			// failed because writing ended is told by writing, not by the
			// error: a store may answer its caller's deadline with its own.
			for {
				e, err := s.Next(writing)
				if err == nil {
					take(e)
					continue
				}
				if writing.Err() == nil {
					t.Errorf("subscriber %d after %q: next: %v", i, r.after, err)
					return
				}
				break
			}
			// Then read on until the log's last event.
			<-writing.Done()
			for n := len(r.got); n == 0 || lock.CompareEventIDs(r.got[n-1].ID, last) < 0; n = len(r.got) {
				e, err := next1(s)
				if err != nil {
					t.Errorf("subscriber %d after %q: next after %d events, the log's last being %s: %v", i, r.after, n, last, err)
					return
				}
				take(e)
			}
			// Nothing more: anything would be a repeat.
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
			defer cancel()
			if e, err := s.Next(ctx); err == nil {
				r.got = append(r.got, e)
			}
			r.ok = true
			results[i] = r
		})
	}
	wg.Wait()
	<-writing.Done()

	evs := all()
	for i, r := range results {
		if !r.ok {
			continue // reported
		}
		want := after(evs, r.after)
		if r.after == "" {
			// From now: a gapless run of the log up to its end, which
			// begins at the latest with the first event recorded after it
			// subscribed.
			want = append([]lock.Event{r.got[0]}, after(evs, r.got[0].ID)...)
			if first := after(evs, r.mark); len(first) > 0 && lock.CompareEventIDs(r.got[0].ID, first[0].ID) > 0 {
				t.Errorf("subscriber %d from now: first event %s, want %s at the latest", i, r.got[0].ID, first[0].ID)
			}
		}
		if !slices.Equal(ids(r.got), ids(want)) {
			t.Errorf("subscriber %d after %q: got %d events, want %d; first difference at %d",
				i, r.after, len(r.got), len(want), firstDiff(ids(r.got), ids(want)))
		}
	}
}

func firstDiff(a, b []string) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// A subscriber that reads nothing for a while holds up nobody: the others
// get every event at once, and it gets them all later, from the log.
func TestFeed_SlowSubscriber(t *testing.T) {
	log := newTestLog()
	f := mustOpenFeed(t, log, eventfeed.Options{Buffer: 8})
	slow := mustSubscribe(t, f, "", lock.EventFilter{})
	fast := mustSubscribe(t, f, "", lock.EventFilter{})

	var want []lock.Event
	for i := range 100 {
		want = append(want, log.Append(lock.EventGranted, fmt.Sprint("l", i)))
	}
	for _, w := range want {
		if got := next(t, fast); got.ID != w.ID {
			t.Fatalf("fast: got %s, want %s", got.ID, w.ID)
		}
	}
	for _, w := range want {
		if got := next(t, slow); got.ID != w.ID {
			t.Fatalf("slow: got %s, want %s", got.ID, w.ID)
		}
	}
	// Back on the live feed.
	e := log.Append(lock.EventGranted, "again")
	if got := next(t, slow); got.ID != e.ID {
		t.Fatalf("slow: got %s, want %s", got.ID, e.ID)
	}
}

func TestFeed_Filter(t *testing.T) {
	log := newTestLog()
	f := mustOpenFeed(t, log, eventfeed.Options{Buffer: 2, Page: 2})
	early := log.Append(lock.EventGranted, "x")
	byLock := mustSubscribe(t, f, "", lock.EventFilter{Lock: "deploy:prod"})
	byPrefix := mustSubscribe(t, f, "", lock.EventFilter{Prefix: "deploy:"})
	byType := mustSubscribe(t, f, "", lock.EventFilter{Types: []lock.EventType{lock.EventReleased, lock.EventExpired}})
	resumed := mustSubscribe(t, f, early.ID, lock.EventFilter{Lock: "deploy:prod", Types: []lock.EventType{lock.EventGranted}})

	var all []lock.Event
	// Many events that pass no filter, more than the buffers hold.
	for i := range 20 {
		all = append(all, log.Append(lock.EventGranted, fmt.Sprint("other", i)))
	}
	all = append(all,
		log.Append(lock.EventGranted, "deploy:prod"),
		log.Append(lock.EventGranted, "deploy:staging"),
		log.Append(lock.EventReleased, "deploy:prod"),
		log.Append(lock.EventExpired, "db"),
		log.Append(lock.EventGranted, "deploy:prod"),
	)
	check := func(name string, s *eventfeed.Subscription, filter lock.EventFilter) {
		t.Helper()
		for _, w := range all {
			if !filter.Match(w) {
				continue
			}
			if got := next(t, s); got.ID != w.ID {
				t.Fatalf("%s: got %s %s %s, want %s %s %s", name, got.ID, got.Type, got.Lock, w.ID, w.Type, w.Lock)
			}
		}
		nothingWithin(t, s, 20*time.Millisecond)
	}
	check("lock", byLock, lock.EventFilter{Lock: "deploy:prod"})
	check("prefix", byPrefix, lock.EventFilter{Prefix: "deploy:"})
	check("types", byType, lock.EventFilter{Types: []lock.EventType{lock.EventReleased, lock.EventExpired}})
	check("resumed", resumed, lock.EventFilter{Lock: "deploy:prod", Types: []lock.EventType{lock.EventGranted}})
}

func TestFeed_EventsGone(t *testing.T) {
	log := newTestLog()
	var evs []lock.Event
	for range 10 {
		evs = append(evs, log.Append(lock.EventGranted, "a"))
	}
	log.Trim(3) // keeps evs[7:]
	f := mustOpenFeed(t, log, eventfeed.Options{})

	t.Run("ResumePointTrimmed", func(t *testing.T) {
		_, err := f.Subscribe(t.Context(), evs[2].ID, lock.EventFilter{})
		wantGone(t, err, evs[7].ID)
	})
	t.Run("LastTrimmedIsFine", func(t *testing.T) {
		s := mustSubscribe(t, f, evs[6].ID, lock.EventFilter{})
		for _, w := range evs[7:] {
			if got := next(t, s); got.ID != w.ID {
				t.Fatalf("got %s, want %s", got.ID, w.ID)
			}
		}
	})
	t.Run("FellBehind", func(t *testing.T) {
		f := mustOpenFeed(t, log, eventfeed.Options{Buffer: 2, Page: 2})
		s := mustSubscribe(t, f, "", lock.EventFilter{})
		var more []lock.Event
		for range 20 {
			more = append(more, log.Append(lock.EventGranted, "a"))
		}
		log.Trim(5) // keeps more[15:]
		// What fitted its buffer, if anything, then events-gone: the log
		// has moved on past where it stands.
		var got []lock.Event
		var err error
		for err == nil {
			var e lock.Event
			if e, err = next1(s); err == nil {
				got = append(got, e)
			}
		}
		if len(got) > 2 || !slices.Equal(ids(got), ids(more[:len(got)])) {
			t.Errorf("got %v before the error, want a prefix of %v", ids(got), ids(more[:2]))
		}
		wantGone(t, err, more[15].ID)
		if _, again := next1(s); again != err {
			t.Errorf("next after events-gone: %v, want the same error", again)
		}
	})
}

// A subscriber that falls behind what the memory store's log keeps fails
// with events-gone, after what it could still be given without a gap.
func TestFeed_EventsGone_MemoryStore(t *testing.T) {
	mem := memory.NewWithOptions(memory.Options{MaxEvents: 10})
	t.Cleanup(func() { _ = mem.Close() })
	ctx := context.Background()
	// One event first: the subscriber then has a place in the log (see
	// the package doc on a log that has recorded nothing).
	if _, err := mem.TryAcquire(ctx, lock.AcquireRequest{Lock: "first", Owner: "o", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	f := mustOpenFeed(t, mem, eventfeed.Options{Buffer: 2, Page: 2})
	s := mustSubscribe(t, f, "", lock.EventFilter{})
	for i := range 15 {
		g, err := mem.TryAcquire(ctx, lock.AcquireRequest{Lock: fmt.Sprint("l", i), Owner: "o", TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := mem.Release(ctx, lock.LeaseRef{Lock: g.Lease.Lock, ID: g.Lease.ID}, true); err != nil {
			t.Fatal(err)
		}
	}
	kept, err := mem.ReadEvents(ctx, "", 100)
	if err != nil || len(kept) != 10 {
		t.Fatalf("the log keeps %d events (%v), want 10", len(kept), err)
	}
	n := 0
	for {
		if _, err = next1(s); err != nil {
			break
		}
		n++
	}
	if n > 2 {
		t.Errorf("%d events before the error, want at most the 2 its buffer holds", n)
	}
	wantGone(t, err, kept[0].ID)
}

func wantGone(t *testing.T, err error, oldest string) {
	t.Helper()
	if lock.ErrorCode(err) != lock.CodeEventsGone {
		t.Fatalf("err = %v, want events-gone", err)
	}
	if got := lock.AsError(err).Oldest; got != oldest {
		t.Errorf("oldest = %q, want %q", got, oldest)
	}
}

// When the reader itself loses its place in the log, its subscribers go on
// from theirs, without a gap.
func TestFeed_ReaderLosesItsPlace(t *testing.T) {
	log := newTestLog()
	f := mustOpenFeed(t, log, eventfeed.Options{})
	s := mustSubscribe(t, f, "", lock.EventFilter{})
	first := log.Append(lock.EventGranted, "a")
	if got := next(t, s); got.ID != first.ID {
		t.Fatalf("got %s, want %s", got.ID, first.ID)
	}
	log.FailWait(lock.EventsGone(first.ID, ""))
	var want []lock.Event
	for range 5 {
		want = append(want, log.Append(lock.EventGranted, "a"))
	}
	for _, w := range want {
		if got := next(t, s); got.ID != w.ID {
			t.Fatalf("got %s, want %s", got.ID, w.ID)
		}
	}
}

// A failed read of the log is retried; the subscribers notice nothing but
// the delay.
func TestFeed_ReaderRetries(t *testing.T) {
	log := newTestLog()
	f := mustOpenFeed(t, log, eventfeed.Options{RetryPause: 10 * time.Millisecond})
	s := mustSubscribe(t, f, "", lock.EventFilter{})
	log.FailWait(lock.Unavailable(errors.New("connection refused")))
	e := log.Append(lock.EventGranted, "a")
	if got := next(t, s); got.ID != e.ID {
		t.Fatalf("got %s, want %s", got.ID, e.ID)
	}
}

// However many subscribe, one reader waits on the log, and none once the
// last subscription is closed.
func TestFeed_OneReader(t *testing.T) {
	log := newTestLog()
	f := mustOpenFeed(t, log, eventfeed.Options{})
	var subs []*eventfeed.Subscription
	for range 50 {
		subs = append(subs, mustSubscribe(t, f, "", lock.EventFilter{}))
	}
	e := log.Append(lock.EventGranted, "a")
	for _, s := range subs {
		if got := next(t, s); got.ID != e.ID {
			t.Fatalf("got %s, want %s", got.ID, e.ID)
		}
	}
	if n := log.maxWait.Load(); n != 1 {
		t.Errorf("%d reads of the log waited at once, want 1", n)
	}
	for _, s := range subs {
		s.Close()
	}
	waitFor(t, "the reader to stop", func() bool { return log.waits.Load() == 0 })

	s := mustSubscribe(t, f, "", lock.EventFilter{})
	e = log.Append(lock.EventGranted, "b")
	if got := next(t, s); got.ID != e.ID {
		t.Fatalf("after a restart: got %s, want %s", got.ID, e.ID)
	}
}

func TestFeed_Close(t *testing.T) {
	log := newTestLog()
	f := eventfeed.New(log, eventfeed.Options{})
	s := mustSubscribe(t, f, "", lock.EventFilter{})
	done := make(chan error, 1)
	go func() {
		_, err := s.Next(context.Background())
		done <- err
	}()
	time.Sleep(10 * time.Millisecond)
	f.Close()
	select {
	case err := <-done:
		if !errors.Is(err, eventfeed.ErrClosed) {
			t.Errorf("next: %v, want ErrClosed", err)
		}
	case <-time.After(promptly):
		t.Fatal("next did not return after Close")
	}
	if _, err := f.Subscribe(t.Context(), "", lock.EventFilter{}); !errors.Is(err, eventfeed.ErrClosed) {
		t.Errorf("subscribe: %v, want ErrClosed", err)
	}
	if n := log.waits.Load(); n != 0 {
		t.Errorf("%d reads still wait after Close", n)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(promptly)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}
