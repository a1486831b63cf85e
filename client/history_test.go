package client_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/lockapi/lockapi/client"
	"github.com/lockapi/lockapi/internal/eventfeed"
	"github.com/lockapi/lockapi/internal/history"
	lockhttp "github.com/lockapi/lockapi/internal/http"
	"github.com/lockapi/lockapi/internal/lock"
	"github.com/lockapi/lockapi/internal/store/memory"
)

// History and LockStats read the server's window of lock events into the
// SDK's own types; a PastLease marshals to the server's JSON.
func TestHistoryAndLockStats(t *testing.T) {
	t.Parallel()
	mem := memory.New()
	t.Cleanup(func() { _ = mem.Close() })
	feed := eventfeed.New(mem.Events(), eventfeed.Options{})
	t.Cleanup(feed.Close)
	released := make(chan struct{}, 16)
	w := history.Start(feed, mem.Events(), history.Options{Added: func(e lock.Event) {
		if e.Type == lock.EventReleased {
			released <- struct{}{}
		}
	}})
	t.Cleanup(w.Close)
	<-w.Ready()
	e := mustOpenEnv(t, mem, lockhttp.Config{Events: feed, History: w})
	ctx := context.Background()

	l := e.MustAcquire("job", client.AcquireOptions{Owner: "w1"})
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-released:
	case <-time.After(promptly):
		t.Fatal("the release never reached the window")
	}
	now := e.MustAcquire("job", client.AcquireOptions{Owner: "w2"})

	leases, err := e.Client.History(ctx, "job", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(leases) != 2 || leases[0].Owner != "w2" || leases[0].Token != now.Token() || !leases[0].EndedAt.IsZero() ||
		leases[1].EndedBy != client.EndedReleased || !leases[1].HeldKnown || !leases[1].WaitedKnown || leases[1].Waited != 0 {
		t.Fatalf("history: %+v", leases)
	}
	resp, err := http.Get(e.URL + "/v1/locks/job/history")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var server struct {
		Leases json.RawMessage `json:"leases"`
	}
	if err := json.Unmarshal(body, &server); err != nil {
		t.Fatal(err)
	}
	if mine, _ := json.Marshal(leases); string(mine) != string(server.Leases) {
		t.Errorf("PastLease JSON:\n%s\nthe server's:\n%s", mine, server.Leases)
	}

	st, err := e.Client.LockStats(ctx, client.LockStatsOptions{Window: 5 * time.Minute, Sort: client.SortByWaited, Limit: 5})
	if err != nil {
		t.Fatal(err)
	}
	if st.Window != 5*time.Minute || st.Sort != client.SortByWaited || len(st.Minutes) != 5 || len(st.Locks) != 1 ||
		st.Locks[0].Lock != "job" || st.Locks[0].Grants != 2 || len(st.Locks[0].GrantsPerMinute) != 5 {
		t.Fatalf("stats: %+v", st)
	}
}
