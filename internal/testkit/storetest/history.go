package storetest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/lockapi/lockapi/internal/eventfeed"
	"github.com/lockapi/lockapi/internal/history"
	"github.com/lockapi/lockapi/internal/lock"
)

// historyBehaviours check the history window (internal/history) on the
// store's log as lockapi serve wires it: one feed, the window following
// it. On Redis Cluster that is the log merged over the masters'.
var historyBehaviours = []behaviour{
	{"History_window_follows_the_log", func(t *testing.T, backend Backend) {
		s := backend.Open(t)
		log := eventLogOf(t, backend, s)
		name := fmt.Sprintf("hist:%d", time.Now().UnixNano())
		feed := eventfeed.New(log, eventfeed.Options{})
		t.Cleanup(feed.Close)
		added := make(chan lock.Event, 64)
		w := history.Start(feed, log, history.Options{Added: func(e lock.Event) {
			if strings.HasPrefix(e.Lock, name) {
				added <- e
			}
		}})
		t.Cleanup(w.Close)
		<-w.Ready()

		g1 := tryAcquire(t, s, lock.AcquireRequest{Lock: name, Owner: "o1", Principal: "p"})
		release(t, s, name, g1.Lease.ID, true)
		g2 := tryAcquire(t, s, lock.AcquireRequest{Lock: name, Owner: "o2", Principal: "p",
			WaiterID: lock.NewWaiterID(lock.AcquireRequest{Lock: name}), Waited: 250 * time.Millisecond})
		if _, err := s.ForceRelease(ctx, name, "admin"); err != nil {
			t.Fatal(err)
		}
		g3 := tryAcquire(t, s, lock.AcquireRequest{Lock: name, Owner: "o3", Principal: "p"})
		timeout := time.After(10 * time.Second)
		for seen := 0; seen < 5; {
			select {
			case <-added:
				seen++
			case <-timeout:
				t.Fatalf("the window took in %d of the 5 events", seen)
			}
		}

		var got []string
		for _, l := range w.History(name, 10) {
			got = append(got, fmt.Sprintf("%s %d %s %v", l.Owner, l.Token, l.EndedBy, l.Waited))
		}
		want := []string{
			fmt.Sprintf("o3 %d  0s", g3.Lease.Token),
			fmt.Sprintf("o2 %d force_released 250ms", g2.Lease.Token),
			fmt.Sprintf("o1 %d released 0s", g1.Lease.Token),
		}
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("history:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		st := w.Stats(history.StatsQuery{Window: 5 * time.Minute, Limit: 10, Visible: func(n string) bool { return n == name }})
		if len(st.Locks) != 1 || st.Locks[0].Grants != 3 || st.Locks[0].ForceReleases != 1 || st.Locks[0].WaitedP99 != 250*time.Millisecond {
			t.Errorf("stats: %+v", st.Locks)
		}
	}},
}
