package http_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/lockapi/lockapi/internal/auth"
	"github.com/lockapi/lockapi/internal/eventfeed"
	"github.com/lockapi/lockapi/internal/history"
	lockhttp "github.com/lockapi/lockapi/internal/http"
	"github.com/lockapi/lockapi/internal/lock"
	"github.com/lockapi/lockapi/internal/store/memory"
)

// historyEnv is a server whose history window follows its memory store's
// events, as lockapi serve wires it; added receives each event the window
// took in.
func historyEnv(t *testing.T, cfg lockhttp.Config) (*Env, <-chan lock.Event) {
	t.Helper()
	mem := memory.New()
	t.Cleanup(func() { _ = mem.Close() })
	feed := eventfeed.New(mem.Events(), eventfeed.Options{})
	t.Cleanup(feed.Close)
	added := make(chan lock.Event, 256)
	w := history.Start(feed, mem.Events(), history.Options{Added: func(e lock.Event) { added <- e }})
	t.Cleanup(w.Close)
	<-w.Ready() // what follows comes by the feed, and is told to added
	cfg.Events, cfg.History = feed, w
	return mustOpenEnvOn(t, mem, &HookStore{Store: mem}, cfg), added
}

// until reads added until an event of typ of name comes.
func until(t *testing.T, added <-chan lock.Event, typ lock.EventType, name string) {
	t.Helper()
	for {
		if e := Within(t, added, fmt.Sprintf("the window taking in %s of %s", typ, name)); e.Type == typ && e.Lock == name {
			return
		}
	}
}

func TestHistory_and_stats(t *testing.T) {
	t.Parallel()
	newKey := func(principal string, scopes []auth.Scope, patterns ...string) (string, string) {
		key, line, err := auth.NewKey(principal, scopes, patterns)
		if err != nil {
			t.Fatal(err)
		}
		return key, line
	}
	ciKey, ciLine := newKey("ci", []auth.Scope{auth.ScopeRead}, "ci:*")
	opsKey, opsLine := newKey("ops", []auth.Scope{auth.ScopeAdmin}, "ci:*")
	rootKey, rootLine := newKey("root", []auth.Scope{auth.ScopeAdmin}, "*")
	writeKey, writeLine := newKey("writer", []auth.Scope{auth.ScopeWrite}, "*")
	keys, err := auth.ParseKeys(strings.Join([]string{ciLine, opsLine, rootLine, writeLine}, "\n"))
	if err != nil {
		t.Fatal(err)
	}
	e, added := historyEnv(t, lockhttp.Config{Keys: keys})
	as := func(key string) []string { return []string{"Authorization", "Bearer " + key} }
	acquire := func(key, name, body string) lockhttp.Lease {
		t.Helper()
		resp := e.Do("POST", "/v1/locks/"+name+"/leases", body, as(key)...)
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("acquire %s: %d %s", name, resp.StatusCode, resp.Body)
		}
		return Decode[lockhttp.Lease](t, resp)
	}

	// o1 lets its lease expire; o2, waiting, gets the lock then and
	// releases it; o3 holds it now.
	acquire(opsKey, "ci:a", `{"owner":"o1","ttl_ms":300}`)
	l2 := acquire(opsKey, "ci:a", `{"owner":"o2","wait_ms":10000}`)
	if resp := e.Do("DELETE", "/v1/locks/ci:a/leases/"+l2.LeaseID, "", as(opsKey)...); resp.StatusCode != http.StatusOK {
		t.Fatalf("release: %d %s", resp.StatusCode, resp.Body)
	}
	l3 := acquire(opsKey, "ci:a", `{"owner":"o3"}`)
	acquire(rootKey, "prod:db", `{"owner":"p"}`)
	until(t, added, lock.EventGranted, "prod:db")

	h := Decode[lockhttp.LockHistory](t, e.Do("GET", "/v1/locks/ci:a/history", "", as(ciKey)...))
	if len(h.Leases) != 3 {
		t.Fatalf("history of ci:a: %+v, want 3 leases", h.Leases)
	}
	now, second, first := h.Leases[0], h.Leases[1], h.Leases[2]
	if now.Owner != "o3" || now.FencingToken != l3.FencingToken || now.EndedAt != "" || now.HeldMs != nil || now.WaitedMs == nil || *now.WaitedMs != 0 {
		t.Errorf("current holder: %+v", now)
	}
	// The wait outlasted o1's TTL of 300 ms, less the time it took to
	// start it: 100 ms is a bound that still proves it was counted.
	if second.Owner != "o2" || second.EndedBy != "released" || second.WaitedMs == nil || *second.WaitedMs < 100 || second.HeldMs == nil {
		t.Errorf("released lease: %+v", second)
	} else {
		t.Logf("o2 waited %d ms for o1's 300 ms TTL", *second.WaitedMs)
	}
	if first.Owner != "o1" || first.Principal != "ops" || first.EndedBy != "expired" || first.HeldMs == nil || *first.HeldMs < 250 {
		t.Errorf("expired lease: %+v", first)
	}
	if h := Decode[lockhttp.LockHistory](t, e.Do("GET", "/v1/locks/ci:a/history?limit=1", "", as(ciKey)...)); len(h.Leases) != 1 {
		t.Errorf("history with limit=1: %+v", h.Leases)
	}

	for _, c := range []struct {
		key   string
		locks string
	}{{ciKey, "ci:a"}, {opsKey, "ci:a"}, {rootKey, "ci:a prod:db"}} {
		st := Decode[lockhttp.LocksStats](t, e.Do("GET", "/v1/stats/locks?window=5m&sort=expiries", "", as(c.key)...))
		var names []string
		for _, l := range st.Locks {
			names = append(names, l.Lock)
		}
		if got := strings.Join(names, " "); got != c.locks {
			t.Errorf("stats locks: %q, want %q", got, c.locks)
		}
		if a := st.Locks[0]; a.Grants != 3 || a.Expiries != 1 || len(a.GrantsPerMinute) != 5 || a.WaitedP99Ms < 100 {
			t.Errorf("stats of ci:a: %+v", a)
		}
		if len(st.Minutes) != 5 || len(st.Expiring) != 1 || st.Expiring[0].Principal != "ops" {
			t.Errorf("minutes %+v, expiring %+v", st.Minutes, st.Expiring)
		}
	}

	WantProblem(t, e.Do("GET", "/v1/locks/prod:db/history", "", as(ciKey)...), http.StatusForbidden, "forbidden")
	WantProblem(t, e.Do("GET", "/v1/locks/ci:a/history", "", as(writeKey)...), http.StatusForbidden, "forbidden")
	WantProblem(t, e.Do("GET", "/v1/stats/locks", "", as(writeKey)...), http.StatusForbidden, "forbidden")
	WantProblem(t, e.Do("GET", "/v1/stats/locks", ""), http.StatusUnauthorized, "unauthorized")
	m := e.Malformed(t)
	for _, q := range []string{"window=90m", "window=0m", "window=15", "window=900s", "sort=nope", "limit=0"} {
		WantProblem(t, m.Do("GET", "/v1/stats/locks?"+q, "", as(ciKey)...), http.StatusBadRequest, "invalid-request")
	}
	WantProblem(t, m.Do("GET", "/v1/locks/ci:a/history?limit=x", "", as(ciKey)...), http.StatusBadRequest, "invalid-request")
}

// A server that reads no events answers both routes 501, saying why.
func TestHistory_without_events(t *testing.T) {
	t.Parallel()
	e := MustOpenEnv(t, lockhttp.Config{})
	for _, path := range []string{"/v1/locks/a/history", "/v1/stats/locks"} {
		p := WantProblem(t, e.Do("GET", path, ""), http.StatusNotImplemented, "events-disabled")
		if !strings.Contains(p.Detail, "LOCKAPI_EVENTS=false") {
			t.Errorf("%s: detail %q does not say why", path, p.Detail)
		}
	}
}
