package ui

import (
	"context"
	"fmt"
	"net/url"
	"regexp"
	"testing"
	"time"

	"github.com/lockapi/lockapi/internal/lock"
	"github.com/lockapi/lockapi/internal/store/memory"
	redisstore "github.com/lockapi/lockapi/internal/store/redis"
	"github.com/lockapi/lockapi/internal/testkit/redistest"
)

// TestRecentEvents_busy_log checks the page shown after a force release on
// a log busier than the page reads (scanLimit): it shows the newest events,
// the force release first, and its live feed continues right after them,
// so that no event is shown nowhere.
func TestRecentEvents_busy_log(t *testing.T) {
	t.Run("Memory", func(t *testing.T) {
		mem := memory.New()
		t.Cleanup(func() { _ = mem.Close() })
		checkBusyLog(t, mem)
	})
	t.Run("Redis", func(t *testing.T) {
		if testing.Short() {
			t.Skip("starts a Redis")
		}
		rdb, err := redisstore.NewClient(redisstore.ClientConfig{URL: redistest.Start(t).URL})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = rdb.Close() })
		st, err := redisstore.New(rdb, redisstore.Options{Prefix: "uitest:", Events: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close() })
		checkBusyLog(t, st)
	})
}

func checkBusyLog(t *testing.T, store lock.Store) {
	ctx := context.Background()
	const busy = scanLimit + 500
	for i := 0; i < busy; i += 2 { // a grant and a release each
		g, err := store.TryAcquire(ctx, lock.AcquireRequest{Lock: "busy", Owner: fmt.Sprint("w", i), TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := store.Release(ctx, lock.LeaseRef{Lock: "busy", ID: g.Lease.ID}, true); err != nil {
			t.Fatal(err)
		}
	}
	d := newDash(t, store)
	d.grant(t, "deploy", "ci")
	cookie, csrf := d.signIn(t, d.admin)
	w := serve(d.h, "POST", "/ui/locks/deploy/release", cookie, url.Values{"csrf": {csrf}})
	if loc := w.Header().Get("Location"); loc != "/ui/?released=deploy" {
		t.Fatalf("force release: %d, Location %q", w.Code, loc)
	}
	body := serve(d.h, "GET", "/ui/?released=deploy", cookie, nil).Body.String()
	items := regexp.MustCompile(`<li data-id="([^"]+)" data-type="([^"]+)" data-lock="([^"]+)">`).FindAllStringSubmatch(body, -1)
	if len(items) != recentEvents {
		t.Fatalf("%d events shown, want %d:\n%s", len(items), recentEvents, body)
	}
	if items[0][2] != string(lock.EventForceReleased) || items[0][3] != "deploy" || items[1][2] != string(lock.EventGranted) || items[1][3] != "deploy" {
		t.Fatalf("newest events shown: %q then %q, want deploy's force_released then granted", items[0][1:], items[1][1:])
	}
	for i := 1; i < len(items); i++ {
		if lock.CompareEventIDs(items[i-1][1], items[i][1]) <= 0 {
			t.Fatalf("events not newest first: %s before %s", items[i-1][1], items[i][1])
		}
	}
	after := regexp.MustCompile(`data-after="([^"]*)"`).FindStringSubmatch(body)
	if after == nil || after[1] != items[0][1] {
		t.Fatalf("the live feed starts after %q, want the page's newest event %q", after, items[0][1])
	}
	if regexp.MustCompile(`may be missing|event log is busy`).MatchString(body) {
		t.Errorf("a note about missing events on a page that misses none:\n%s", body)
	}
}
