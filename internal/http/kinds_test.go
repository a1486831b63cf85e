package http_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	lockhttp "github.com/lockapi/lockapi/internal/http"
	"github.com/lockapi/lockapi/internal/lock"
)

// TestAcquire_KindFieldsReachTheStore checks that mode, limit and fair are
// passed on as they were given, and that their absence is the default.
func TestAcquire_KindFieldsReachTheStore(t *testing.T) {
	e := MustOpenHookedEnv(t, lockhttp.Config{})
	for _, tc := range []struct {
		body string
		want lock.AcquireRequest
	}{
		{`{"owner":"a"}`, lock.AcquireRequest{}},
		{`{"owner":"a","mode":"shared"}`, lock.AcquireRequest{Mode: lock.Shared}},
		{`{"owner":"a","mode":"exclusive","limit":10000}`, lock.AcquireRequest{Mode: lock.Exclusive, Limit: 10000}},
		{`{"owner":"a","limit":1,"fair":true}`, lock.AcquireRequest{Limit: 1, Fair: true}},
		{`{"owner":"a","mode":"shared","fair":false}`, lock.AcquireRequest{Mode: lock.Shared}},
	} {
		t.Run(tc.body, func(t *testing.T) {
			e := e.For(t)
			var got lock.AcquireRequest
			e.Hooks.OnTryAcquire = func(ctx context.Context, req lock.AcquireRequest) (lock.Grant, error) {
				got = req
				return e.Mem.TryAcquire(ctx, req)
			}
			defer func() { e.Hooks.OnTryAcquire = nil }()
			l := e.Acquire("fields", tc.body)
			defer e.Do("DELETE", "/v1/locks/fields/leases/"+l.LeaseID+"?all=true", "")
			if got.Mode != tc.want.Mode || got.Limit != tc.want.Limit || got.Fair != tc.want.Fair || got.WaiterID != "" {
				t.Fatalf("the store got mode %q limit %d fair %v waiter %q, want %+v", got.Mode, got.Limit, got.Fair, got.WaiterID, tc.want)
			}
		})
	}
}

// TestConflicts checks how each refusal of the domain is answered, with the
// store's answers injected.
func TestConflicts(t *testing.T) {
	e := MustOpenHookedEnv(t, lockhttp.Config{})
	refuse := func(err error) {
		e.Hooks.OnTryAcquire = func(context.Context, lock.AcquireRequest) (lock.Grant, error) { return lock.Grant{}, err }
	}
	t.Cleanup(func() { e.Hooks.OnTryAcquire = nil })

	t.Run("LimitMismatch409", func(t *testing.T) {
		e := e.For(t)
		refuse(lock.LimitMismatch("gpu", 8, 4))
		resp := e.Do("POST", "/v1/locks/gpu/leases", `{"owner":"a","limit":8,"wait_ms":1000}`)
		p := WantProblem(t, resp, http.StatusConflict, "limit-mismatch")
		if p.Title != "Limit mismatch" || p.Lock != "gpu" || p.Holder != nil || p.QueueLength != nil ||
			!strings.Contains(p.Detail, "4 permits") || !strings.Contains(p.Detail, "8 permits") {
			t.Fatalf("problem %+v", p)
		}
		if ra := resp.Header.Get("Retry-After"); ra != "" {
			t.Errorf("Retry-After %q: trying again changes nothing while the name is held", ra)
		}
	})

	t.Run("UpgradeRefused409", func(t *testing.T) {
		e := e.For(t)
		refuse(lock.UpgradeRefused("docs", "reader"))
		resp := e.Do("POST", "/v1/locks/docs/leases", `{"owner":"reader","mode":"exclusive"}`)
		p := WantProblem(t, resp, http.StatusConflict, "upgrade-refused")
		if p.Title != "Upgrade refused" || p.Lock != "docs" || p.Holder != nil || !strings.Contains(p.Detail, `"reader"`) {
			t.Fatalf("problem %+v", p)
		}
		if ra := resp.Header.Get("Retry-After"); ra != "" {
			t.Errorf("Retry-After %q", ra)
		}
	})

	t.Run("OnlyTheQueueInTheWay409", func(t *testing.T) {
		e := e.For(t)
		refuse(lock.Held("fifo", lock.HeldBy{ExpiresIn: 700 * time.Millisecond, Queue: 3}))
		resp := e.Do("POST", "/v1/locks/fifo/leases", `{"owner":"late"}`)
		p := WantProblem(t, resp, http.StatusConflict, "lock-held")
		if p.Holder != nil || strings.Contains(string(resp.Body), `"holder"`) {
			t.Fatalf("a holder was invented: %s", resp.Body)
		}
		if p.QueueLength == nil || *p.QueueLength != 3 || p.Lock != "fifo" {
			t.Fatalf("problem %+v", p)
		}
		if !strings.Contains(p.Detail, `3 queued waiters come before this acquire of lock "fifo"`) || strings.Contains(p.Detail, "held by") {
			t.Errorf("detail %q", p.Detail)
		}
		if ra := resp.Header.Get("Retry-After"); ra != "1" {
			t.Errorf("Retry-After = %q, want 1", ra)
		}
	})

	t.Run("UnconfirmedHolder409", func(t *testing.T) {
		// Redlock mode, masters that do not all name one granted lease:
		// the store's detail stays, no holder and no queue are invented.
		e := e.For(t)
		refuse(&lock.Error{Code: lock.CodeHeld, Detail: `lock "split" is not free on a majority`,
			HeldBy: &lock.HeldBy{ExpiresIn: 1500 * time.Millisecond, Unconfirmed: true}})
		resp := e.Do("POST", "/v1/locks/split/leases", `{"owner":"late"}`)
		p := WantProblem(t, resp, http.StatusConflict, "lock-held")
		if p.Holder != nil || strings.Contains(string(resp.Body), `"holder"`) {
			t.Fatalf("a holder was invented: %s", resp.Body)
		}
		if p.QueueLength == nil || *p.QueueLength != 0 || p.Detail != `lock "split" is not free on a majority` {
			t.Fatalf("problem %+v", p)
		}
		if ra := resp.Header.Get("Retry-After"); ra != "2" {
			t.Errorf("Retry-After = %q, want 2", ra)
		}
	})

	t.Run("HeldWithQueue409", func(t *testing.T) {
		e := e.For(t)
		refuse(lock.Held("busy", lock.HeldBy{Owner: "w", Token: 7, ExpiresIn: 2500 * time.Millisecond, LeaseExpiresIn: 9 * time.Second, Queue: 2}))
		resp := e.Do("POST", "/v1/locks/busy/leases", `{"owner":"late"}`)
		p := WantProblem(t, resp, http.StatusConflict, "lock-held")
		if p.Holder == nil || p.Holder.Owner != "w" || p.Holder.FencingToken != 7 || p.QueueLength == nil || *p.QueueLength != 2 {
			t.Fatalf("problem %+v holder %+v", p, p.Holder)
		}
		if p.Holder.ExpiresInMs != 9000 {
			t.Errorf("expires_in_ms = %d, want the lease's 9000, not when to look again", p.Holder.ExpiresInMs)
		}
		if ra := resp.Header.Get("Retry-After"); ra != "3" {
			t.Errorf("Retry-After = %q, want 3", ra)
		}
	})
}

// inspect reads a lock's state through the API.
func (e *Env) inspect(name string) (lockhttp.LockState, Response) {
	e.t.Helper()
	resp := e.Do("GET", "/v1/locks/"+name, "")
	if resp.StatusCode != http.StatusOK {
		e.t.Fatalf("inspect %s: %d %s", name, resp.StatusCode, resp.Body)
	}
	return Decode[lockhttp.LockState](e.t, resp), resp
}

func TestKinds_ReadWrite(t *testing.T) {
	e := MustOpenHookedEnv(t, lockhttp.Config{})
	r1 := e.Acquire("rw", `{"owner":"reader-1","mode":"shared","metadata":{"r":"1"}}`)
	r2 := e.Acquire("rw", `{"owner":"reader-2","mode":"shared"}`)
	if r1.Mode != lock.Shared || r1.Limit != 0 || r2.Mode != lock.Shared || r2.FencingToken <= r1.FencingToken || r1.LeaseID == r2.LeaseID {
		t.Fatalf("readers' leases %+v, %+v", r1, r2)
	}

	st, resp := e.inspect("rw")
	if !st.Held || st.Mode == nil || *st.Mode != lock.KindShared || st.Holder != nil || len(st.Holders) != 2 || st.QueueLength != 0 || st.Limit != 0 {
		t.Fatalf("state %s", resp.Body)
	}
	for i, want := range []lockhttp.Lease{r1, r2} {
		h := st.Holders[i]
		if h.Owner != want.Owner || h.Mode != lock.Shared || h.FencingToken != want.FencingToken || h.HoldCount != 1 || h.ExpiresAt != want.ExpiresAt || h.AcquiredAt != want.AcquiredAt {
			t.Errorf("holders[%d] = %+v, want %s's lease", i, h, want.Owner)
		}
	}
	if st.Holders[0].Metadata["r"] != "1" || st.Holders[1].Metadata == nil {
		t.Errorf("holders' metadata %+v", st.Holders)
	}
	if strings.Contains(string(resp.Body), r1.LeaseID) || strings.Contains(string(resp.Body), r2.LeaseID) {
		t.Fatalf("a lease id leaked: %s", resp.Body)
	}

	t.Run("WriterRefused409", func(t *testing.T) {
		e := e.For(t)
		p := WantProblem(t, e.Do("POST", "/v1/locks/rw/leases", `{"owner":"writer"}`), http.StatusConflict, "lock-held")
		if p.Holder == nil || (p.Holder.Owner != "reader-1" && p.Holder.Owner != "reader-2") || p.Lock != "rw" {
			t.Fatalf("problem %+v holder %+v", p, p.Holder)
		}
	})

	t.Run("UpgradeRefused409", func(t *testing.T) {
		e := e.For(t)
		before := e.State("rw").Index
		p := WantProblem(t, e.Do("POST", "/v1/locks/rw/leases", `{"owner":"reader-1","mode":"exclusive","wait_ms":5000}`), http.StatusConflict, "upgrade-refused")
		if p.Lock != "rw" || p.Holder != nil || !strings.Contains(p.Detail, "reader-1") {
			t.Fatalf("problem %+v", p)
		}
		if e.State("rw").Index != before {
			t.Fatal("a refused upgrade changed the lock")
		}
	})

	t.Run("ReaderReenters200", func(t *testing.T) {
		e := e.For(t)
		resp := e.Do("POST", "/v1/locks/rw/leases", `{"owner":"reader-1","mode":"shared"}`)
		l := Decode[lockhttp.Lease](t, resp)
		if resp.StatusCode != http.StatusOK || l.LeaseID != r1.LeaseID || l.HoldCount != 2 || l.Mode != lock.Shared {
			t.Fatalf("%d %+v", resp.StatusCode, l)
		}
	})

	t.Run("WaitingWriterHoldsOffNewReaders", func(t *testing.T) {
		e := e.For(t)
		index := e.State("rw").Index
		done := make(chan Response, 1)
		go func() {
			resp, err := e.send(context.Background(), "POST", "/v1/locks/rw/leases", `{"owner":"writer","wait_ms":60000}`)
			if err != nil {
				t.Error(err)
			}
			done <- resp
		}()
		Within(t, e.Hooks.Watching, "writer waits")
		// The blocking query sees the writer join the queue.
		changed := Decode[lockhttp.LockState](t, e.Do("GET", "/v1/locks/rw?index="+index+"&wait_ms=5000", ""))
		for changed.QueueLength == 0 {
			time.Sleep(5 * time.Millisecond)
			changed, _ = e.inspect("rw")
		}
		if changed.QueueLength != 1 || len(changed.Holders) != 2 {
			t.Fatalf("state with a waiting writer %+v", changed)
		}
		// A new reader waits behind the writer: only the queue is in its way.
		p := WantProblem(t, e.Do("POST", "/v1/locks/rw/leases", `{"owner":"reader-3","mode":"shared"}`), http.StatusConflict, "lock-held")
		if p.QueueLength == nil || *p.QueueLength != 1 {
			t.Fatalf("problem %+v", p)
		}
		if p.Holder != nil || !strings.Contains(p.Detail, "1 queued waiter comes") {
			t.Fatalf("problem %+v holder %+v: the readers are not in a reader's way", p, p.Holder)
		}

		e.Do("DELETE", "/v1/locks/rw/leases/"+r1.LeaseID+"?all=true", "")
		e.Do("DELETE", "/v1/locks/rw/leases/"+r2.LeaseID, "")
		resp := Within(t, done, "writer granted")
		w := Decode[lockhttp.Lease](t, resp)
		if resp.StatusCode != http.StatusCreated || w.Mode != lock.Exclusive || w.FencingToken <= r2.FencingToken {
			t.Fatalf("writer %d %+v", resp.StatusCode, w)
		}
		st, resp2 := e.inspect("rw")
		if st.Mode == nil || *st.Mode != lock.KindExclusive || st.Holder == nil || st.Holder.Owner != "writer" ||
			len(st.Holders) != 1 || st.Holders[0].Mode != lock.Exclusive || st.QueueLength != 0 {
			t.Fatalf("state %s", resp2.Body)
		}
	})
}

func TestKinds_Semaphore(t *testing.T) {
	e := MustOpenEnv(t, lockhttp.Config{})
	p1 := e.Do("POST", "/v1/locks/sem/leases", `{"owner":"w","limit":2}`)
	p2 := e.Do("POST", "/v1/locks/sem/leases", `{"owner":"w","limit":2}`)
	if p1.StatusCode != http.StatusCreated || p2.StatusCode != http.StatusCreated {
		t.Fatalf("permits: %d %s, %d %s", p1.StatusCode, p1.Body, p2.StatusCode, p2.Body)
	}
	a, b := Decode[lockhttp.Lease](t, p1), Decode[lockhttp.Lease](t, p2)
	if a.Limit != 2 || b.Limit != 2 || a.Mode != lock.Exclusive || a.LeaseID == b.LeaseID || b.FencingToken <= a.FencingToken || b.HoldCount != 1 {
		t.Fatalf("permits %+v, %+v", a, b)
	}

	st, resp := e.inspect("sem")
	if st.Mode == nil || *st.Mode != lock.KindSemaphore || st.Limit != 2 || st.Holder != nil || len(st.Holders) != 2 {
		t.Fatalf("state %s", resp.Body)
	}

	WantProblem(t, e.Do("POST", "/v1/locks/sem/leases", `{"owner":"x","limit":2}`), http.StatusConflict, "lock-held")
	for _, body := range []string{`{"owner":"x","limit":3}`, `{"owner":"x"}`, `{"owner":"w","mode":"shared"}`} {
		resp := e.Do("POST", "/v1/locks/sem/leases", body)
		p := WantProblem(t, resp, http.StatusConflict, "limit-mismatch")
		if p.Lock != "sem" || resp.Header.Get("Retry-After") != "" {
			t.Fatalf("%s: problem %+v, Retry-After %q", body, p, resp.Header.Get("Retry-After"))
		}
	}
	e.Do("DELETE", "/v1/locks/sem/leases/"+a.LeaseID, "")
	if l := e.Acquire("sem", `{"owner":"x","limit":2}`); l.Limit != 2 {
		t.Fatalf("permit %+v", l)
	}

	// A lock's name refuses a limit.
	e.Acquire("plain", `{"owner":"a"}`)
	WantProblem(t, e.Do("POST", "/v1/locks/plain/leases", `{"owner":"a","limit":2}`), http.StatusConflict, "limit-mismatch")
}

func TestKinds_Fair(t *testing.T) {
	e := MustOpenHookedEnv(t, lockhttp.Config{})
	holder := e.Acquire("fifo", `{"owner":"a","ttl_ms":600000}`)
	done := make(chan Response, 1)
	go func() {
		resp, err := e.send(context.Background(), "POST", "/v1/locks/fifo/leases", `{"owner":"b","fair":true,"wait_ms":60000}`)
		if err != nil {
			t.Error(err)
		}
		done <- resp
	}()
	Within(t, e.Hooks.Watching, "fair waiter waits")
	for st, _ := e.inspect("fifo"); st.QueueLength != 1; st, _ = e.inspect("fifo") {
		time.Sleep(5 * time.Millisecond)
	}
	p := WantProblem(t, e.Do("POST", "/v1/locks/fifo/leases", `{"owner":"c"}`), http.StatusConflict, "lock-held")
	if p.Holder == nil || p.Holder.Owner != "a" || p.QueueLength == nil || *p.QueueLength != 1 {
		t.Fatalf("problem %+v holder %+v", p, p.Holder)
	}
	e.Do("DELETE", "/v1/locks/fifo/leases/"+holder.LeaseID, "")
	if resp := Within(t, done, "fair waiter granted"); resp.StatusCode != http.StatusCreated {
		t.Fatalf("fair waiter %d %s", resp.StatusCode, resp.Body)
	}
}

// A multi-lock takes readers' leases too.
func TestKinds_SharedMultiLock(t *testing.T) {
	e := MustOpenEnv(t, lockhttp.Config{})
	e.Acquire("s:x", `{"owner":"other","mode":"shared"}`)
	leases := e.AcquireAll(`{"locks":["s:y","s:x"],"owner":"me","mode":"shared"}`)
	if leases[0].Mode != lock.Shared || leases[1].Mode != lock.Shared || leases[1].Lock != "s:x" {
		t.Fatalf("leases %+v", leases)
	}
	if st, _ := e.inspect("s:x"); len(st.Holders) != 2 {
		t.Fatalf("s:x holders %+v", st.Holders)
	}
	WantProblem(t, e.Do("POST", "/v1/leases", `{"locks":["s:y","s:z"],"owner":"writer"}`), http.StatusConflict, "lock-held")
	if st, _ := e.inspect("s:z"); st.Held {
		t.Fatal("a refused multi-lock kept s:z")
	}
}
