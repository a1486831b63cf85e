package client_test

import (
	"context"
	"errors"
	"maps"
	"testing"
	"time"

	"github.com/lockapi/lockapi/client"
	lockhttp "github.com/lockapi/lockapi/internal/http"
)

// proclaimTarget is how soon a proclaimed value should reach the
// observers (issue 30); proclaimBound is what the test asserts, with room
// for a loaded 2-core machine under -race, while still far below any
// polling interval.
const (
	proclaimTarget = 250 * time.Millisecond
	proclaimBound  = time.Second
)

// TestElection runs three candidates for one election against a real
// server, on the memory store and on Redis: exactly one leads, the others
// see it through Observe, a proclaimed value reaches them within
// proclaimTarget, and a force release of the leader tells it (Lost) and
// elects a follower with a higher term.
func TestElection(t *testing.T) {
	t.Parallel()
	t.Run("Memory", func(t *testing.T) {
		t.Parallel()
		testElection(t, MustOpenMemoryEnv(t, lockhttp.Config{}))
	})
	t.Run("Redis", func(t *testing.T) {
		t.Parallel()
		e, _ := MustOpenRedisEnv(t, lockhttp.Config{})
		testElection(t, e)
	})
}

type campaignResult struct {
	l   *client.Leadership
	err error
}

func testElection(t *testing.T, e *Env) {
	const name = "election:svc"
	// The leader learns of the force release at its next renewal (TTL/3):
	// a short TTL keeps the test short. The lease's watch of its lock
	// (issue 30, section 1) tells it sooner.
	const ttl = 2 * time.Second
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	candidates := []string{"node-a", "node-b", "node-c"}
	observers := map[string]<-chan client.LeaderInfo{}
	won := make(chan campaignResult, len(candidates))
	for _, who := range candidates {
		observers[who] = e.Client.Observe(ctx, name)
		if info := nextInfo(t, observers[who]); info.Elected {
			t.Fatalf("%s observed a leader before any campaign: %+v", who, info)
		}
	}
	for _, who := range candidates {
		go func() {
			l, err := e.Client.Campaign(ctx, name, map[string]string{"addr": who}, client.CampaignOptions{Owner: who, TTL: ttl})
			won <- campaignResult{l, err}
		}()
	}
	var elected []*client.Leadership
	t.Cleanup(func() {
		// The last campaign ends with ctx; every leadership resigns.
		cancel()
		for range len(candidates) - len(elected) {
			if r := <-won; r.l != nil {
				elected = append(elected, r.l)
			}
		}
		for _, l := range elected {
			_ = l.Resign(context.Background())
		}
	})

	leader := wonElection(t, won)
	elected = append(elected, leader)
	for who, obs := range observers {
		info := nextInfo(t, obs)
		if !info.Elected || info.Owner != leader.Owner() || info.Term != leader.Term() || info.Value["addr"] != leader.Owner() {
			t.Fatalf("%s observed %+v; the leader is %s, term %d", who, info, leader.Owner(), leader.Term())
		}
	}
	if got, err := e.Client.Leader(ctx, name); err != nil || got.Owner != leader.Owner() || got.Term != leader.Term() {
		t.Fatalf("Leader = %+v, %v", got, err)
	}
	select {
	case r := <-won:
		t.Fatalf("a second candidate won while %s leads: %+v", leader.Owner(), r)
	default:
	}

	// A proclaimed value reaches every observer, alone: same leader, same
	// term, new value.
	value := map[string]string{"addr": leader.Owner(), "state": "serving"}
	start := time.Now()
	if err := leader.Proclaim(ctx, value); err != nil {
		t.Fatal(err)
	}
	for who, obs := range observers {
		info := nextInfo(t, obs)
		took := time.Since(start)
		t.Logf("the proclaimed value reached %s's observer in %v (target %v, asserted <= %v)", who, took, proclaimTarget, proclaimBound)
		if info.Owner != leader.Owner() || info.Term != leader.Term() || !maps.Equal(info.Value, value) {
			t.Fatalf("%s observed %+v after the proclaim", who, info)
		}
		if took > proclaimBound {
			t.Errorf("the proclaimed value reached %s's observer after %v, want <= %v", who, took, proclaimBound)
		}
	}
	if !maps.Equal(leader.Value(), value) {
		t.Errorf("the leadership's value is %v after proclaiming %v", leader.Value(), value)
	}

	// The leader is force-released: it is told, and a follower leads with
	// a higher term.
	start = time.Now()
	e.ForceRelease(name)
	MustClose(t, leader.Lost(), ttl+promptly, "the old leader's Lost after a force release")
	t.Logf("the old leader was told of its loss in %v (TTL %v)", time.Since(start), ttl)
	if !errors.Is(leader.Err(), client.ErrLeaseLost) {
		t.Errorf("old leader's Err = %v", leader.Err())
	}
	next := wonElection(t, won)
	if next.Owner() == leader.Owner() || next.Term() <= leader.Term() {
		t.Fatalf("new leader %s term %d after %s term %d", next.Owner(), next.Term(), leader.Owner(), leader.Term())
	}
	elected = append(elected, next)
	for who, obs := range observers {
		info := nextElected(t, obs)
		if info.Owner != next.Owner() || info.Term != next.Term() {
			t.Fatalf("%s observed %+v; the new leader is %s, term %d", who, info, next.Owner(), next.Term())
		}
	}
	if err := leader.Resign(ctx); !errors.Is(err, client.ErrLeaseLost) {
		t.Errorf("the old leader's Resign = %v, want ErrLeaseLost", err)
	}
}

// wonElection waits for a campaign to win.
func wonElection(t *testing.T, won <-chan campaignResult) *client.Leadership {
	t.Helper()
	select {
	case r := <-won:
		if r.err != nil {
			t.Fatalf("campaign: %v", r.err)
		}
		return r.l
	case <-time.After(2 * promptly):
		t.Fatal("no candidate won")
	}
	return nil
}

// nextInfo returns what obs sends next.
func nextInfo(t *testing.T, obs <-chan client.LeaderInfo) client.LeaderInfo {
	t.Helper()
	select {
	case info, ok := <-obs:
		if !ok {
			t.Fatal("the observer's channel closed")
		}
		return info
	case <-time.After(2 * promptly):
		t.Fatal("the observer sent nothing")
	}
	return client.LeaderInfo{}
}

// nextElected skips what obs sends until a leader is elected: between two
// leaders an observer may or may not see nobody leading.
func nextElected(t *testing.T, obs <-chan client.LeaderInfo) client.LeaderInfo {
	t.Helper()
	for {
		if info := nextInfo(t, obs); info.Elected {
			return info
		}
	}
}

// TestObserve_DeduplicatesAndEnds checks that Observe sends only changes,
// not every answer of its blocking queries (a renewal changes the index,
// not the leader), and that its channel closes with its context.
func TestObserve_DeduplicatesAndEnds(t *testing.T) {
	t.Parallel()
	e := MustOpenMemoryEnv(t, lockhttp.Config{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	obs := e.Client.Observe(ctx, "election:quiet")
	if info := nextInfo(t, obs); info.Elected {
		t.Fatalf("first %+v", info)
	}
	l := e.MustAcquire("election:quiet", client.AcquireOptions{Owner: "a", Manual: true, TTL: time.Minute})
	if info := nextInfo(t, obs); !info.Elected || info.Owner != "a" {
		t.Fatalf("after the grant %+v", info)
	}
	for range 3 {
		if err := l.Renew(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.UpdateMetadata(ctx, map[string]string{"v": "2"}); err != nil {
		t.Fatal(err)
	}
	// The renewals changed the index three times; the next thing sent is
	// the new value.
	if info := nextInfo(t, obs); info.Value["v"] != "2" {
		t.Fatalf("after three renewals and an update %+v", info)
	}
	cancel()
	select {
	case _, ok := <-obs:
		if ok {
			t.Fatal("Observe sent after its context ended")
		}
	case <-time.After(promptly):
		t.Fatal("Observe's channel stayed open after its context ended")
	}
}
