package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockapi/lockapi/client"
	"github.com/lockapi/lockapi/internal/auth"
	lockhttp "github.com/lockapi/lockapi/internal/http"
)

func TestEvents(t *testing.T) {
	url := startServer(t, lockhttp.Config{})
	l := hold(t, url, "job:1", "worker-7")
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	hold(t, url, "other", "worker-8")

	t.Run("Lines", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		// --after 0: from the start of the log.
		r := start(ctx, "events", "--server", url, "--prefix", "job:", "--after", "0")
		mustSee(t, r.Stdout.Seen("released"), "the release", r)
		lines := strings.Split(strings.TrimSpace(r.Stdout.String()), "\n")
		if len(lines) != 2 {
			t.Fatalf("stdout:\n%s", r.Stdout)
		}
		token := "token=" + strconv.FormatUint(l.Token(), 10)
		for i, want := range [][]string{{"granted", "job:1", "owner=worker-7", token, "holds=1"}, {"released", "job:1", "owner=worker-7", token, "holds=0"}} {
			for _, w := range want {
				if !strings.Contains(lines[i], w) {
					t.Errorf("line %q lacks %q", lines[i], w)
				}
			}
			if _, err := time.Parse(time.RFC3339, strings.Fields(lines[i])[0]); err != nil {
				t.Errorf("line %q does not start with a time: %v", lines[i], err)
			}
		}

		// New events follow, and SIGINT (the context) ends it with 0.
		hold(t, url, "job:2", "worker-9")
		mustSee(t, r.Stdout.Seen("job:2"), "the new grant", r)
		cancel()
		if res := r.Wait(t, promptly); res.Code != 0 || strings.Contains(res.Stdout, "other") {
			t.Errorf("exit %d\nstdout:\n%s\nstderr: %s", res.Code, res.Stdout, res.Stderr)
		}
	})

	t.Run("JSON", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		r := start(ctx, "events", "--server", url, "--lock", "job:1", "--types", "released", "--after", "0-0", "--json")
		mustSee(t, r.Stdout.Seen("\n"), "a line", r)
		var ev struct {
			ID           string `json:"id"`
			Type         string `json:"type"`
			Lock         string `json:"lock"`
			Owner        string `json:"owner"`
			Mode         string `json:"mode"`
			FencingToken uint64 `json:"fencing_token"`
			HoldCount    int    `json:"hold_count"`
			Time         string `json:"time"`
		}
		line, _, _ := strings.Cut(r.Stdout.String(), "\n")
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		if ev.Type != "released" || ev.Lock != "job:1" || ev.Owner != "worker-7" || ev.Mode != "exclusive" || ev.FencingToken != l.Token() || ev.ID == "" || ev.Time == "" {
			t.Errorf("event %+v", ev)
		}
		cancel()
		r.Wait(t, promptly)
	})

	t.Run("Usage", func(t *testing.T) {
		for _, args := range [][]string{
			{"events", "--server", url, "--lock", "a", "--prefix", "b"},
			{"events", "--server", url, "extra"},
			{"events", "--nope"},
			{"events", "--server", url, "--types", "granted,nope"},
			{"events", "--server", url, "--after", "yesterday"},
			{"events", "--server", url, "--lock", "bad name"},
		} {
			if r := lockapi(t, args...); r.Code != exitUsage {
				t.Errorf("lockapi %q: exit %d, want %d\nstderr: %s", args, r.Code, exitUsage, r.Stderr)
			}
		}
		if r := lockapi(t, "events", "-h"); r.Code != 0 || !strings.Contains(r.Stdout, "usage: lockapi events") {
			t.Errorf("-h: exit %d\n%s", r.Code, r.Stdout)
		}
	})

	t.Run("Unavailable", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		down := "http://" + ln.Addr().String()
		_ = ln.Close()
		if r := lockapi(t, "events", "--server", down); r.Code != exitUnavailable {
			t.Errorf("exit %d, want %d", r.Code, exitUnavailable)
		}
	})

	// A stream that ends is reconnected, and stderr says so: why, and
	// after which event it resumes.
	t.Run("Reconnect", func(t *testing.T) {
		var calls atomic.Int32
		resumed := make(chan string, 4)
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n := calls.Add(1)
			if n > 1 {
				resumed <- r.Header.Get("Last-Event-ID")
			}
			w.Header().Set("Content-Type", "text/event-stream")
			w.WriteHeader(http.StatusOK)
			id := fmt.Sprintf("%d-0", n)
			fmt.Fprintf(w, "id: %s\nevent: granted\ndata: {\"id\":%q,\"type\":\"granted\",\"lock\":\"job:%d\",\"owner\":\"w\",\"principal\":\"\",\"mode\":\"exclusive\",\"fencing_token\":%d,\"hold_count\":1,\"time\":\"2025-11-22T14:02:00Z\"}\n\n", id, id, n, n)
			w.(http.Flusher).Flush()
			if n > 1 {
				<-r.Context().Done() // the second stream stays open
			}
		}))
		defer srv.Close()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		r := start(ctx, "events", "--server", srv.URL)
		mustSee(t, r.Stdout.Seen("job:2"), "the event after the reconnect", r)
		select {
		case id := <-resumed:
			if id != "1-0" {
				t.Errorf("resumed after %q, want 1-0", id)
			}
		case <-time.After(promptly):
			t.Fatal("no reconnect")
		}
		cancel()
		res := r.Wait(t, promptly)
		lines := strings.Split(strings.TrimSpace(res.Stderr), "\n")
		if len(lines) != 1 || !strings.Contains(lines[0], "reconnecting") || !strings.Contains(lines[0], "resuming after 1-0") ||
			!strings.Contains(lines[0], "ended") {
			t.Errorf("stderr, want one line per reconnect with the reason and the resume id:\n%s", res.Stderr)
		}
	})

	t.Run("Gone", func(t *testing.T) {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusGone)
			fmt.Fprint(w, `{"type":"https://lockapi.dev/problems/events-gone","title":"Events gone","status":410,"detail":"event \"1-0\" is older than the event log keeps","oldest_id":"9-0"}`)
		}))
		defer srv.Close()
		if r := lockapi(t, "events", "--server", srv.URL, "--after", "1-0"); r.Code != exitUsage || !strings.Contains(r.Stderr, "older than the event log keeps") {
			t.Errorf("exit %d, want %d\nstderr: %s", r.Code, exitUsage, r.Stderr)
		}
	})
}

func TestEvents_APIKey(t *testing.T) {
	key, line, err := auth.NewKey("ci", []auth.Scope{auth.ScopeRead, auth.ScopeWrite}, []string{"ci:*"})
	if err != nil {
		t.Fatal(err)
	}
	keys, err := auth.ParseKeys(line)
	if err != nil {
		t.Fatal(err)
	}
	url := startServer(t, lockhttp.Config{Keys: keys})

	t.Setenv("LOCKAPI_API_KEY", "")
	if r := lockapi(t, "events", "--server", url); r.Code != exitNoPerm {
		t.Errorf("no key: exit %d, want %d\nstderr: %s", r.Code, exitNoPerm, r.Stderr)
	}
	t.Setenv("LOCKAPI_API_KEY", key)
	if r := lockapi(t, "events", "--server", url, "--lock", "prod:db"); r.Code != exitNoPerm {
		t.Errorf("a lock outside the key's patterns: exit %d, want %d\nstderr: %s", r.Code, exitNoPerm, r.Stderr)
	}

	// With the key, the stream runs.
	c, err := client.New(url, client.WithAPIKey(key))
	if err != nil {
		t.Fatal(err)
	}
	ciLease, err := c.Acquire(context.Background(), "ci:build", client.AcquireOptions{Owner: "b"})
	if err != nil {
		t.Fatal(err)
	}
	defer ciLease.Release(context.Background())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := start(ctx, "events", "--server", url, "--after", "0-0")
	mustSee(t, r.Stdout.Seen("ci:build"), "the grant", r)
	cancel()
	if res := r.Wait(t, promptly); res.Code != 0 {
		t.Errorf("exit %d\nstderr: %s", res.Code, res.Stderr)
	}
}
