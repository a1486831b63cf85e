package http_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/lockapi/lockapi/internal/auth"
	lockhttp "github.com/lockapi/lockapi/internal/http"
	"github.com/lockapi/lockapi/internal/lock"
	"github.com/lockapi/lockapi/internal/metrics"
	"github.com/lockapi/lockapi/internal/webhook"
)

// The names lockapi uses for itself (a webhook worker's lease) are refused
// to every caller, with or without keys, for acquire, inspect, list and
// events: a client that could hold a worker's lease could silence its
// webhook.
func TestReservedNames_refusedToEveryKey(t *testing.T) {
	key, line, err := auth.NewKey("squatter", []auth.Scope{auth.ScopeRead, auth.ScopeWrite}, []string{"*"})
	if err != nil {
		t.Fatal(err)
	}
	admin, adminLine, err := auth.NewKey("ops", []auth.Scope{auth.ScopeAdmin}, []string{"*"})
	if err != nil {
		t.Fatal(err)
	}
	keys, err := auth.ParseKeys(line + "\n" + adminLine)
	if err != nil {
		t.Fatal(err)
	}
	name := webhook.LeaseName("01jd3z8q6w9m4t5r2k7x1b0c8n")
	for _, tc := range []struct {
		env   string
		cfg   lockhttp.Config
		key   string
		admin string
	}{
		{"Open", lockhttp.Config{}, "", ""},
		{"Keys", lockhttp.Config{Keys: keys}, key, admin},
	} {
		t.Run(tc.env, func(t *testing.T) {
			e := MustOpenEnv(t, tc.cfg).Malformed(t)
			as := func(k string) []string {
				if k == "" {
					return nil
				}
				return []string{"Authorization", "Bearer " + k}
			}
			for _, req := range []struct{ method, path, body string }{
				{"POST", "/v1/locks/" + name + "/leases", `{"owner":"squatter","ttl_ms":86400000,"wait_ms":60000,"fair":true}`},
				{"POST", "/v1/locks/lockapi.anything/leases", ""},
				{"POST", "/v1/leases", `{"locks":["a","` + name + `"]}`},
				{"GET", "/v1/locks/" + name, ""},
				{"GET", "/v1/locks/" + name + "?index=1&wait_ms=1000", ""},
				{"POST", "/v1/locks/" + name + "/leases/01HZZZZZZZZZZZZZZZZZZZZZZZ/renew", ""},
				{"GET", "/v1/events?lock=" + name, ""},
				{"GET", "/v1/events?prefix=lockapi.", ""},
			} {
				WantProblem(t, e.Do(req.method, req.path, req.body, as(tc.key)...), http.StatusForbidden, "reserved-name")
			}
			WantProblem(t, e.Do("GET", "/v1/locks?prefix=lockapi.web", "", as(tc.admin)...), http.StatusForbidden, "reserved-name")

			// A reserved name that is held (by a worker) is left out of a
			// listing that spans it.
			if _, err := e.Mem.TryAcquire(context.Background(), lock.AcquireRequest{Lock: name, Owner: "w", Principal: webhook.LeasePrincipal, TTL: time.Minute}); err != nil {
				t.Fatal(err)
			}
			if _, err := e.Mem.TryAcquire(context.Background(), lock.AcquireRequest{Lock: "lock:visible", Owner: "a", TTL: time.Minute}); err != nil {
				t.Fatal(err)
			}
			list := Decode[lockhttp.LockList](t, e.Do("GET", "/v1/locks?prefix=lo", "", as(tc.admin)...))
			if len(list.Locks) != 1 || list.Locks[0].Lock != "lock:visible" {
				t.Fatalf("listing under lo = %+v", list)
			}
			// An admin may still free one that something took.
			if resp := e.Do("DELETE", "/v1/locks/"+name, "", as(tc.admin)...); resp.StatusCode != http.StatusOK {
				t.Fatalf("force release of %s: %d %s", name, resp.StatusCode, resp.Body)
			}
		})
	}
}

// fixedWebhooks serves one subscription, with no worker: the test plays
// the worker, and the squatter.
type fixedWebhooks struct {
	lockhttp.Webhooks
	sub webhook.Subscription
}

func (f fixedWebhooks) List(context.Context) ([]webhook.Subscription, error) {
	return []webhook.Subscription{f.sub}, nil
}

func (f fixedWebhooks) Get(_ context.Context, id string) (webhook.Subscription, error) {
	return f.sub, nil
}

// A webhook whose worker lease something other than a worker holds says
// so, in its worker_lease and in lockapi_webhooks_blocked.
func TestWebhooks_workerLeaseHeldByAnother(t *testing.T) {
	sub := webhook.Subscription{ID: "01jd3z8q6w9m4t5r2k7x1b0c8n", URL: "https://hooks.example/x", Types: []lock.EventType{}, Source: webhook.SourceAPI, CreatedAt: time.Now()}
	e := MustOpenEnv(t, lockhttp.Config{Metrics: metrics.New(), Webhooks: fixedWebhooks{sub: sub}})
	ctx := context.Background()
	status := func() lockhttp.WorkerLease {
		t.Helper()
		got := Decode[lockhttp.Webhook](t, e.Do("GET", "/v1/webhooks/"+sub.ID, ""))
		list := Decode[lockhttp.WebhookList](t, e.Do("GET", "/v1/webhooks", ""))
		if len(list.Webhooks) != 1 || list.Webhooks[0].WorkerLease != got.WorkerLease {
			t.Fatalf("listed %+v, got %+v", list, got)
		}
		return got.WorkerLease
	}
	blocked := func() float64 {
		t.Helper()
		e.Server.AdvanceGaugeClock(15 * time.Second) // past the cached value
		return scrapeMetrics(t, e)["lockapi_webhooks_blocked"]
	}

	if got := status(); got != lockhttp.WorkerLeaseFree || blocked() != 0 {
		t.Fatalf("worker_lease %q, blocked %v with no lease", got, blocked())
	}
	g, err := e.Mem.TryAcquire(ctx, lock.AcquireRequest{Lock: webhook.LeaseName(sub.ID), Owner: "squatter", Principal: "team-b", TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if got := status(); got != lockhttp.WorkerLeaseOther || blocked() != 1 {
		t.Fatalf("worker_lease %q, blocked %v with a squatter", got, blocked())
	}
	if _, err := e.Mem.Release(ctx, lock.LeaseRef{Lock: g.Lease.Lock, ID: g.Lease.ID}, true); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Mem.TryAcquire(ctx, lock.AcquireRequest{Lock: webhook.LeaseName(sub.ID), Owner: "host/1", Principal: webhook.LeasePrincipal, TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if got := status(); got != lockhttp.WorkerLeaseWorker || blocked() != 0 {
		t.Fatalf("worker_lease %q, blocked %v with a worker", got, blocked())
	}
}
