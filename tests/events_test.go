package tests

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lockapi/lockapi/internal/auth"
	"github.com/lockapi/lockapi/internal/testkit/redistest"
)

// sseEvent is one event of a GET /v1/events stream.
type sseEvent struct {
	ID      string
	Type    string
	Lock    string `json:"lock"`
	Session string `json:"session"`
}

// openStream opens GET /v1/events with query and, when set, Last-Event-ID,
// and sends its events on the returned channel until ctx ends or the
// stream breaks.
func openStream(t *testing.T, ctx context.Context, base, key, query, lastID string) <-chan sseEvent {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, "GET", base+"/v1/events?"+query, nil)
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("GET /v1/events?%s: %d %s", query, resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	out := make(chan sseEvent, 1000)
	go func() {
		defer close(out)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		var ev sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "id: "):
				ev.ID = strings.TrimPrefix(line, "id: ")
			case strings.HasPrefix(line, "event: "):
				ev.Type = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				_ = json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &ev)
			case line == "" && ev.ID != "":
				out <- ev
				ev = sseEvent{}
			}
		}
	}()
	return out
}

// next reads the next event within a generous bound.
func next(t *testing.T, c <-chan sseEvent) sseEvent {
	t.Helper()
	select {
	case ev, ok := <-c:
		if !ok {
			t.Fatal("the stream ended")
		}
		return ev
	case <-time.After(5 * time.Second):
		t.Fatal("no event within 5s")
	}
	return sseEvent{}
}

// TestE2E_events_resume_without_gap cuts an event stream in the middle of a
// run of changes, resumes it with Last-Event-ID, and checks that the two
// halves together are exactly the changes, in order: nothing skipped, nothing
// repeated (a repeat would be allowed by at-least-once, but there is none to
// make here), across two lockapi instances sharing one Redis.
func TestE2E_events_resume_without_gap(t *testing.T) {
	t.Run("redis", func(t *testing.T) {
		rs := redistest.Start(t)
		resumeWithoutGap(t, []string{"LOCKAPI_REDIS_URL=" + rs.URL}, false)
	})
	// On Redis Cluster the names live on different masters, each with a log
	// of its own: each lock's events are in order, and no event is lost or
	// repeated across the resume.
	t.Run("cluster", func(t *testing.T) {
		cl := redistest.StartCluster(t)
		resumeWithoutGap(t, []string{"LOCKAPI_REDIS_MODE=cluster", "LOCKAPI_REDIS_URL=" + cl.URL()}, true)
	})
}

func resumeWithoutGap(t *testing.T, env []string, perLock bool) {
	a, b := newAPI(t, startServer(t, env)), startServer(t, env)

	ctx, cut := context.WithCancel(context.Background())
	first := openStream(t, ctx, b.URL, "", "prefix=ev:", "")
	var want []string
	for i := range 20 {
		name := fmt.Sprintf("ev:%d", i%3)
		l := a.mustAcquire(name, map[string]any{"owner": "w", "ttl_ms": 60000}, 201)
		a.release(l)
		want = append(want, "granted "+name, "released "+name)
		a.mustAcquire("other", map[string]any{"owner": "w", "ttl_ms": 60000}, 201) // filtered out
		a.must("DELETE", "/v1/locks/other", nil)
	}
	var got []string
	var last string
	for range 15 {
		ev := next(t, first)
		got, last = append(got, ev.Type+" "+ev.Lock), ev.ID
	}
	cut() // the client goes away mid-run

	for i := 20; i < 25; i++ { // changes while nobody listens
		name := fmt.Sprintf("ev:%d", i%3)
		l := a.mustAcquire(name, map[string]any{"owner": "w", "ttl_ms": 60000}, 201)
		a.release(l)
		want = append(want, "granted "+name, "released "+name)
	}
	second := openStream(t, context.Background(), b.URL, "", "prefix=ev:", last)
	for len(got) < len(want) {
		ev := next(t, second)
		got = append(got, ev.Type+" "+ev.Lock)
	}
	if perLock {
		got, want = byLock(got), byLock(want)
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("events across the resume:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	select {
	case ev := <-second:
		t.Fatalf("an extra event after the last change: %+v", ev)
	case <-time.After(200 * time.Millisecond):
	}
}

// TestE2E_events_follow_key_patterns: a key whose patterns cover team-a:*
// sees team-a's events and none of team-b's, even without a filter.
func TestE2E_events_follow_key_patterns(t *testing.T) {
	rs := redistest.Start(t)
	adminKey, adminLine, err := auth.NewKey("ops", []auth.Scope{auth.ScopeAdmin, auth.ScopeRead, auth.ScopeWrite}, []string{"*"})
	if err != nil {
		t.Fatal(err)
	}
	teamKey, teamLine, err := auth.NewKey("team-a", []auth.Scope{auth.ScopeRead}, []string{"team-a:*"})
	if err != nil {
		t.Fatal(err)
	}
	s := startServer(t, []string{"LOCKAPI_REDIS_URL=" + rs.URL, "LOCKAPI_API_KEYS=" + adminLine + ";" + teamLine})
	stream := openStream(t, context.Background(), s.URL, teamKey, "", "")

	for _, name := range []string{"team-b:x", "team-a:x", "team-b:y", "team-a:y"} {
		req, _ := http.NewRequest("POST", s.URL+"/v1/locks/"+name+"/leases", strings.NewReader(`{"owner":"w","ttl_ms":60000}`))
		req.Header.Set("Authorization", "Bearer "+adminKey)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != 201 {
			t.Fatalf("acquire %s: %v %v", name, err, resp)
		}
		resp.Body.Close()
	}
	for _, want := range []string{"team-a:x", "team-a:y"} {
		if ev := next(t, stream); ev.Lock != want || ev.Type != "granted" {
			t.Fatalf("event %+v, want the grant of %s", ev, want)
		}
	}
	select {
	case ev := <-stream:
		t.Fatalf("team-a's key saw %+v", ev)
	case <-time.After(200 * time.Millisecond):
	}
}

// byLock orders "<type> <lock>" lines by lock, keeping each lock's order.
func byLock(lines []string) []string {
	out := slices.Clone(lines)
	slices.SortStableFunc(out, func(a, b string) int {
		_, la, _ := strings.Cut(a, " ")
		_, lb, _ := strings.Cut(b, " ")
		return strings.Compare(la, lb)
	})
	return out
}
