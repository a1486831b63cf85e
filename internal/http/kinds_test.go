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
		if !strings.Contains(p.Detail, "3 queued waiters") || strings.Contains(p.Detail, "held by") {
			t.Errorf("detail %q", p.Detail)
		}
		if ra := resp.Header.Get("Retry-After"); ra != "1" {
			t.Errorf("Retry-After = %q, want 1", ra)
		}
	})

	t.Run("HeldWithQueue409", func(t *testing.T) {
		e := e.For(t)
		refuse(lock.Held("busy", lock.HeldBy{Owner: "w", Token: 7, ExpiresIn: 2500 * time.Millisecond, Queue: 2}))
		resp := e.Do("POST", "/v1/locks/busy/leases", `{"owner":"late"}`)
		p := WantProblem(t, resp, http.StatusConflict, "lock-held")
		if p.Holder == nil || p.Holder.Owner != "w" || p.Holder.FencingToken != 7 || p.QueueLength == nil || *p.QueueLength != 2 {
			t.Fatalf("problem %+v holder %+v", p, p.Holder)
		}
		if ra := resp.Header.Get("Retry-After"); ra != "3" {
			t.Errorf("Retry-After = %q, want 3", ra)
		}
	})
}
