package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/lockapi/lockapi/client"
	"github.com/lockapi/lockapi/internal/auth"
	"github.com/lockapi/lockapi/internal/eventfeed"
	"github.com/lockapi/lockapi/internal/history"
	lockhttp "github.com/lockapi/lockapi/internal/http"
	"github.com/lockapi/lockapi/internal/lock"
	"github.com/lockapi/lockapi/internal/store/memory"
)

// startHistoryServer is startServer with a history window, as lockapi
// serve wires it; released receives the lock of each release it took in.
func startHistoryServer(t *testing.T) (url string, released <-chan string) {
	t.Helper()
	mem := memory.New()
	t.Cleanup(func() { _ = mem.Close() })
	feed := eventfeed.New(mem.Events(), eventfeed.Options{})
	t.Cleanup(feed.Close)
	ch := make(chan string, 64)
	w := history.Start(feed, mem.Events(), history.Options{Added: func(e lock.Event) {
		if e.Type == lock.EventReleased {
			ch <- e.Lock
		}
	}})
	t.Cleanup(w.Close)
	<-w.Ready()
	cfg := lockhttp.Config{Logger: zerolog.Nop(), Events: feed, History: w}
	cfg.Release, _ = auth.NewReleaseSigner(auth.RandomSecret())
	srv := lockhttp.NewServer(mem, cfg)
	if err := srv.Open("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), promptly)
		defer cancel()
		_ = srv.Close(ctx)
	})
	return srv.URL(), ch
}

func TestHistoryAndTop(t *testing.T) {
	t.Parallel()
	url, released := startHistoryServer(t)
	c := newTestClient(t, url)
	ctx := context.Background()
	for _, owner := range []string{"w1", "w2"} {
		l, err := c.Acquire(ctx, "job", client.AcquireOptions{Owner: owner, TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case <-released:
		case <-time.After(promptly):
			t.Fatal("the release never reached the history window")
		}
	}
	hold(t, url, "job", "w3")

	r := lockapi(t, "history", "--server", url, "job")
	lines := strings.Split(strings.TrimSpace(r.Stdout), "\n")
	if r.Code != 0 || len(lines) != 4 || !strings.HasPrefix(lines[0], "TOKEN") ||
		!strings.Contains(lines[1], "w3") || !strings.Contains(lines[1], "holding") ||
		!strings.Contains(lines[2], "w2") || !strings.Contains(lines[2], "released") || !strings.Contains(lines[3], "w1") {
		t.Errorf("history: exit %d, stdout:\n%s\nstderr: %s", r.Code, r.Stdout, r.Stderr)
	}

	r = lockapi(t, "history", "--server", url, "--json", "--limit", "2", "job")
	var h struct {
		Lock   string
		Leases []map[string]any
	}
	if err := json.Unmarshal([]byte(r.Stdout), &h); err != nil || r.Code != 0 || h.Lock != "job" || len(h.Leases) != 2 ||
		h.Leases[0]["owner"] != "w3" || h.Leases[1]["ended_by"] != "released" {
		t.Errorf("history --json: exit %d, %v, stdout %s, stderr %s", r.Code, err, r.Stdout, r.Stderr)
	}

	r = lockapi(t, "top", "--server", url, "-n", "1", "--window", "5m")
	if r.Code != 0 || !strings.Contains(r.Stdout, "3 grants") || !strings.Contains(r.Stdout, " job") || strings.Contains(r.Stdout, clearScreen) {
		t.Errorf("top -n 1: exit %d, stdout:\n%s\nstderr: %s", r.Code, r.Stdout, r.Stderr)
	}

	// Until interrupted: every frame clears the screen first.
	ctx, cancel := context.WithCancel(ctx)
	run := start(ctx, "top", "--server", url, "--interval", "10ms")
	mustSee(t, run.Stdout.Seen(" job"), "a frame of lockapi top", run)
	cancel()
	if res := run.Wait(t, promptly); res.Code != 0 || !strings.HasPrefix(res.Stdout, clearScreen) {
		t.Errorf("top until interrupted: exit %d, stdout %q, stderr %s", res.Code, res.Stdout, res.Stderr)
	}

	for _, args := range [][]string{{"history"}, {"history", "a", "b"}, {"top", "--window", "2h"}, {"top", "--sort", "x"}, {"top", "extra"}} {
		if r := lockapi(t, append(args, "--server", url)...); r.Code != exitUsage {
			t.Errorf("%v: exit %d, want %d; stderr %s", args, r.Code, exitUsage, r.Stderr)
		}
	}
}

// A server without events: the commands say so and exit 69.
func TestHistory_events_off(t *testing.T) {
	t.Parallel()
	url := startServer(t, lockhttp.Config{})
	for _, args := range [][]string{{"history", "job"}, {"top", "-n", "1"}} {
		r := lockapi(t, append(args, "--server", url)...)
		if r.Code != exitUnavailable || !strings.Contains(r.Stderr, "LOCKAPI_EVENTS=false") {
			t.Errorf("%v: exit %d, stderr %s", args, r.Code, r.Stderr)
		}
	}
}
