package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/lockapi/lockapi/client"
	"github.com/lockapi/lockapi/event"
	"github.com/lockapi/lockapi/internal/auth"
	"github.com/lockapi/lockapi/internal/eventfeed"
	lockhttp "github.com/lockapi/lockapi/internal/http"
	"github.com/lockapi/lockapi/internal/lock"
	"github.com/lockapi/lockapi/internal/store/memory"
	"github.com/lockapi/lockapi/internal/webhook"
	"github.com/lockapi/lockapi/internal/webhook/memstate"
)

// wireEvents are one event of every type, each with every optional field
// set (a queue length, a lease id, a session, an update's metadata, a grant's wait), an owner that an HTML-minded
// encoder would escape, and times that are neither UTC nor whole
// milliseconds.
func wireEvents() []lock.Event {
	at := time.Date(2026, 11, 23, 18, 0, 0, 123456789, time.FixedZone("CET", 3600))
	out := make([]lock.Event, len(event.Types))
	for i, typ := range event.Types {
		out[i] = lock.Event{
			ID: "1795460000000-" + strconv.Itoa(i), Type: typ, Lock: "deploy:prod", Owner: `ci "7" <a&b> é`,
			Principal: "ci", LeaseID: "01JD3Z8Q6W9M4T5R2K7X1B0C8N", Mode: lock.Exclusive, Token: 1795459990000123,
			Session: "01JD3Z8Q6W9M4T5R2K7X1B0C8S", HoldCount: 1, Queue: i, Time: at.Add(time.Duration(i) * time.Second),
		}
		if typ == event.Updated {
			out[i].Metadata = map[string]string{"addr": "<a&b>:9000", "state": "serving"}
		}
	}
	out[0].Mode = lock.Shared
	out[0].Waited = 1234 * time.Millisecond
	return out
}

// fixedLog is an event log that holds the given events and never more.
type fixedLog []lock.Event

func (l fixedLog) ReadEvents(_ context.Context, after string, limit int) ([]lock.Event, error) {
	var out []lock.Event
	for _, e := range l {
		if (after == "" || lock.CompareEventIDs(e.ID, after) > 0) && len(out) < limit {
			out = append(out, e)
		}
	}
	return out, nil
}

func (l fixedLog) WaitEvents(ctx context.Context, after string, limit int) ([]lock.Event, error) {
	if evs, _ := l.ReadEvents(ctx, after, limit); len(evs) > 0 {
		return evs, nil
	}
	<-ctx.Done()
	return nil, context.Cause(ctx)
}

func (l fixedLog) LastEventID(context.Context) (string, error) {
	if len(l) == 0 {
		return "", nil
	}
	return l[len(l)-1].ID, nil
}

func (l fixedLog) ReadEventsBefore(_ context.Context, before string, limit int) ([]lock.Event, error) {
	var out []lock.Event
	for _, e := range slices.Backward(l) {
		if (before == "" || lock.CompareEventIDs(e.ID, before) < 0) && len(out) < limit {
			out = append(out, e)
		}
	}
	return out, nil
}

// The four writers of an event (the SSE stream, a webhook delivery, the
// CLI's --json and the Go SDK's value written again) write the same bytes,
// which testdata/event-wire.golden pins; a webhook's lack only the lease
// id, which only admins see.
func TestEventWire(t *testing.T) {
	// A bound for a failure only: a loaded machine may be slow.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	log := fixedLog(wireEvents())
	n := len(log)
	url, hooks := startWireServer(ctx, t, log)

	sse := readSSE(ctx, t, url, n)
	golden := filepath.Join("testdata", "event-wire.golden")
	if *update {
		if err := os.WriteFile(golden, []byte(strings.Join(sse, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	same(t, "the SSE data lines", sse, strings.Split(strings.TrimSuffix(string(want), "\n"), "\n"))

	r := start(ctx, "events", "--server", url, "--after", "0-0", "--json")
	mustSee(t, r.Stdout.Seen(`"id":"`+log[n-1].ID+`"`), "the last event", r)
	same(t, "lockapi events --json", strings.Split(strings.TrimSuffix(r.Stdout.String(), "\n"), "\n"), sse)

	var sdk []string
	for ev, err := range newTestClient(t, url).Events(ctx, client.EventsOptions{After: "0-0"}) {
		if err != nil {
			t.Fatal(err)
		}
		b, err := event.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		if sdk = append(sdk, string(b)); len(sdk) == n {
			break
		}
	}
	same(t, "the SDK's events written again", sdk, sse)

	noLease := regexp.MustCompile(`,"lease_id":"[^"]*"`)
	var hooked []string
	for range n {
		select {
		case b := <-hooks:
			hooked = append(hooked, b)
		case <-ctx.Done():
			t.Fatalf("%d webhook deliveries of %d", len(hooked), n)
		}
	}
	for i := range sse {
		sse[i] = noLease.ReplaceAllString(sse[i], "")
	}
	same(t, "the webhook bodies", hooked, sse)
}

func same(t *testing.T, what string, got, want []string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Errorf("%s:\n%s\nwant:\n%s", what, strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// startWireServer serves log's events (an API without keys: every caller
// is an admin) and delivers them to a webhook, whose bodies come on hooks.
func startWireServer(ctx context.Context, t *testing.T, log fixedLog) (url string, hooks <-chan string) {
	t.Helper()
	mem := memory.New()
	t.Cleanup(func() { _ = mem.Close() })
	feed := eventfeed.New(log, eventfeed.Options{Logger: zerolog.Nop()})
	t.Cleanup(feed.Close)

	got := make(chan string, len(log))
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		select {
		case got <- string(b):
		default: // a redelivery beyond the events: the test reads no more
		}
	}))
	t.Cleanup(recv.Close)
	state := memstate.New()
	// Created with no cursor, it delivers from the log's oldest event.
	sub := webhook.Subscription{ID: webhook.NewID(), URL: recv.URL, Secrets: []string{webhook.NewSecret()}, Source: webhook.SourceAPI}
	if err := state.Create(ctx, sub, "", 0); err != nil {
		t.Fatal(err)
	}
	svc, err := webhook.New(webhook.Config{Store: mem, Log: log, Feed: feed, State: state,
		Policy: webhook.Policy{AllowPrivate: true}, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { svc.Run(runCtx) })
	t.Cleanup(func() { stop(); wg.Wait() })

	signer, _ := auth.NewReleaseSigner(auth.RandomSecret())
	srv := lockhttp.NewServer(mem, lockhttp.Config{Logger: zerolog.Nop(), Release: signer, Events: feed})
	if err := srv.Open("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), promptly)
		defer cancel()
		_ = srv.Close(ctx)
	})
	return srv.URL(), got
}

// readSSE reads the data lines of the first n events of GET /v1/events
// from the log's start.
func readSSE(ctx context.Context, t *testing.T, url string, n int) []string {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"/v1/events?after=0-0", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var data []string
	for sc := bufio.NewScanner(resp.Body); len(data) < n && sc.Scan(); {
		if line, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			data = append(data, line)
		}
	}
	if len(data) < n {
		t.Fatalf("%d events of %d on the stream (%s)", len(data), n, resp.Status)
	}
	return data
}
