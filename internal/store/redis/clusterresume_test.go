package redis_test

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/lockapi/lockapi/internal/eventfeed"
	"github.com/lockapi/lockapi/internal/lock"
	redisstore "github.com/lockapi/lockapi/internal/store/redis"
	"github.com/lockapi/lockapi/internal/testkit/redistest"
)

var resumeSeed = flag.Uint64("resume.seed", 0, "seed of TestClusterEvents_resume_on_two_instances (0: from the clock)")

// resumeWriters, resumeRounds: each writer grants and releases one of its
// names resumeRounds times, two events a round.
const (
	resumeWriters = 3
	resumeRounds  = 200
	resumeEvents  = resumeWriters * resumeRounds * 2
)

// TestClusterEvents_resume_on_two_instances is issue 29's reader on a real
// Cluster: while three writers record events on names of every master, one
// reader reads a few events at a time, cuts, and resumes after the last id
// it got, alternately on two instances (two stores with a Feed each, as two
// lockapi processes). It must get every event once, in id order.
func TestClusterEvents_resume_on_two_instances(t *testing.T) {
	seed := *resumeSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (-resume.seed to repeat)", seed)
	rng := rand.New(rand.NewPCG(seed, 29))

	cluster := redistest.StartCluster(t)
	cfg := redisstore.ClientConfig{URL: cluster.URL(), Mode: redisstore.ModeCluster}
	prefix := "test:" + ulid.Make().String() + ":"
	feeds := []*eventfeed.Feed{}
	var first *redisstore.Store
	for range 2 {
		s := openInstance(t, cfg, prefix)
		first = s
		// Small pages and buffers, so that reads end, and subscribers fall
		// off the live feed, at many points of the merge.
		f := eventfeed.New(s.Events(), eventfeed.Options{Page: 1 + rng.IntN(8), Buffer: 1 + rng.IntN(8)})
		t.Cleanup(f.Close)
		feeds = append(feeds, f)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	werr := make(chan error, resumeWriters)
	for w := range resumeWriters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			werr <- writeRounds(ctx, first, w)
		}()
	}

	got, resumes, err := readCutting(ctx, feeds, rng)
	wg.Wait()
	close(werr)
	for e := range werr {
		if e != nil {
			t.Fatal(e)
		}
	}
	if err != nil {
		t.Fatalf("after %d events and %d resumes: %v", len(got), resumes, err)
	}
	want := readWhole(t, first.Events())
	missing, repeated, disorder := compareRead(want, got)
	t.Logf("%d events made, %d read, %d resumes: %d missing, %d repeated, %d out of order",
		len(want), len(got), resumes, len(missing), len(repeated), disorder)
	if len(want) != resumeEvents || len(missing) > 0 || len(repeated) > 0 || disorder > 0 {
		t.Fatalf("made %d (want %d); missing %v; repeated %v; %d out of order",
			len(want), resumeEvents, missing, repeated, disorder)
	}
}

// openInstance opens a store on cfg under prefix: one lockapi instance.
func openInstance(t *testing.T, cfg redisstore.ClientConfig, prefix string) *redisstore.Store {
	t.Helper()
	c, err := redisstore.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	s, err := redisstore.New(c, redisstore.Options{Events: true, Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// writeRounds grants and releases writer w's names, round after round.
// Each writer has three names, so that the writers' names fall on every
// master.
func writeRounds(ctx context.Context, s *redisstore.Store, w int) error {
	for i := range resumeRounds {
		name := fmt.Sprintf("rs:w%d-%d", w, i%3)
		g, err := s.TryAcquire(ctx, lock.AcquireRequest{Lock: name, Owner: fmt.Sprintf("w%d", w), TTL: time.Minute})
		if err != nil {
			return fmt.Errorf("writer %d: acquire %s: %w", w, name, err)
		}
		if _, err := s.Release(ctx, lock.LeaseRef{Lock: name, ID: g.Lease.ID}, false); err != nil {
			return fmt.Errorf("writer %d: release %s: %w", w, name, err)
		}
	}
	return nil
}

// readCutting reads the events as an SSE client that cuts its connection
// after a few events and resumes after the last id it got (as the stream
// sent it), alternately on each feed, until it has every event made. It
// returns what it read, in the order read.
func readCutting(ctx context.Context, feeds []*eventfeed.Feed, rng *rand.Rand) ([]lock.Event, int, error) {
	filter := lock.EventFilter{Prefix: "rs:"}
	var got []lock.Event
	seen := map[string]bool{}
	last := ""
	conn := 0
	for ; len(seen) < resumeEvents; conn++ {
		f := feeds[conn%len(feeds)]
		var sub *eventfeed.Subscription
		var err error
		if last == "" {
			sub, err = f.SubscribeFromOldest(ctx, filter)
		} else {
			sub, err = f.Subscribe(ctx, last, filter)
		}
		if err != nil {
			return got, conn, err
		}
		for n := 1 + rng.IntN(12); n > 0 && len(seen) < resumeEvents; n-- {
			nctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			e, err := sub.Next(nctx)
			cancel()
			if err != nil {
				sub.Close()
				return got, conn, fmt.Errorf("next after %q: %w (%d of %d events)", last, err, len(seen), resumeEvents)
			}
			got = append(got, e)
			seen[e.ID] = true
			last = e.ID // the SSE stream's id: what the client resumes from
		}
		sub.Close()
	}
	return got, conn, nil
}

// readWhole reads the whole log from its oldest event.
func readWhole(t *testing.T, log lock.EventLog) []lock.Event {
	t.Helper()
	var all []lock.Event
	after := ""
	for {
		page, err := log.ReadEvents(context.Background(), after, 500)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			return all
		}
		all = append(all, page...)
		after = page[len(page)-1].ID
	}
}

// compareRead compares what a reader got with the log: the ids it missed,
// the events it got more than once, and how many it got out of id order.
func compareRead(want, got []lock.Event) (missing, repeated []string, disorder int) {
	count := map[string]int{}
	for i, e := range got {
		count[e.ID]++
		if count[e.ID] == 2 {
			repeated = append(repeated, fmt.Sprintf("%s %s %s owner=%s hc=%d", e.ID, e.Type, e.Lock, e.Owner, e.HoldCount))
		}
		if i > 0 && lock.CompareEventIDs(e.ID, got[i-1].ID) <= 0 && count[e.ID] == 1 {
			disorder++
		}
	}
	for _, e := range want {
		if count[e.ID] == 0 {
			missing = append(missing, e.ID)
		}
	}
	return missing, repeated, disorder
}

// TestClusterEvents_reads_after_an_id_are_the_logs_next checks the cursor
// itself on a real Cluster, while three writers record: a read after
// LastEventID's id on the instance that handed it out, and a read after any
// event id such a read returned on another instance, return the events
// that follow that id in the complete log, none Late. Before issue 29's fix
// LastEventID's id was not yet a place in every log: a read after it on
// its instance found events recorded later with earlier ids, Late.
func TestClusterEvents_reads_after_an_id_are_the_logs_next(t *testing.T) {
	seed := *resumeSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (-resume.seed to repeat)", seed)
	rng := rand.New(rand.NewPCG(seed, 30))
	cluster := redistest.StartCluster(t)
	cfg := redisstore.ClientConfig{URL: cluster.URL(), Mode: redisstore.ModeCluster}
	prefix := "test:" + ulid.Make().String() + ":"
	a, b := openInstance(t, cfg, prefix), openInstance(t, cfg, prefix)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// The writers write until the checks are done.
	wctx, stop := context.WithCancel(ctx)
	werr := make(chan error, resumeWriters)
	for w := range resumeWriters {
		go func() { werr <- writeUntil(wctx, a, w) }()
	}
	type read struct {
		after string
		got   []lock.Event
	}
	var reads []read
	for len(reads) < 2*resumeChecks {
		from, err := b.Events().LastEventID(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got, err := b.Events().ReadEvents(ctx, from, 1+rng.IntN(20))
		if err != nil {
			t.Fatal(err)
		}
		if len(got) == 0 {
			continue // the writers are between two events
		}
		cut := got[rng.IntN(len(got))].ID
		more, err := a.Events().ReadEvents(ctx, cut, 1+rng.IntN(20))
		if err != nil {
			t.Fatal(err)
		}
		reads = append(reads, read{from, got}, read{cut, more})
	}
	stop()
	for range resumeWriters {
		if err := <-werr; err != nil {
			t.Fatal(err)
		}
	}
	whole := readWhole(t, a.Events())
	for _, r := range reads {
		if err := wantNext(whole, r.after, r.got); err != nil {
			t.Fatalf("of %d reads: %v", len(reads), err)
		}
	}
	t.Logf("%d reads after an id, each the log's next events", len(reads))
}

// resumeChecks is how many ids LastEventID hands out in
// TestClusterEvents_reads_after_an_id_are_the_logs_next.
const resumeChecks = 40

// writeUntil grants and releases writer w's names until ctx ends.
func writeUntil(ctx context.Context, s *redisstore.Store, w int) error {
	for i := 0; ; i++ {
		name := fmt.Sprintf("rs:w%d-%d", w, i%3)
		g, err := s.TryAcquire(ctx, lock.AcquireRequest{Lock: name, Owner: fmt.Sprintf("w%d", w), TTL: time.Minute})
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return fmt.Errorf("writer %d: acquire %s: %w", w, name, err)
		}
		if _, err := s.Release(ctx, lock.LeaseRef{Lock: name, ID: g.Lease.ID}, false); err != nil && ctx.Err() == nil {
			return fmt.Errorf("writer %d: release %s: %w", w, name, err)
		}
	}
}

// wantNext checks that got are the events of whole that follow after.
func wantNext(whole []lock.Event, after string, got []lock.Event) error {
	i := 0
	for i < len(whole) && lock.CompareEventIDs(whole[i].ID, after) <= 0 {
		i++
	}
	next := whole[i:]
	for k, e := range got {
		if k >= len(next) || e.ID != next[k].ID || e.Late {
			var ids []string
			for _, n := range next[:min(len(next), len(got)+1)] {
				ids = append(ids, n.ID)
			}
			return fmt.Errorf("a read after %q returned %s (late %v) as event #%d; the log's next are %v", after, e.ID, e.Late, k, ids)
		}
	}
	return nil
}
