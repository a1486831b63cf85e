package http_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	lockhttp "github.com/lockapi/lockapi/internal/http"
	"github.com/lockapi/lockapi/internal/lock"
	"github.com/lockapi/lockapi/internal/metrics"
	"github.com/lockapi/lockapi/internal/webhook"
)

// countedWebhooks is fixedWebhooks that counts its listings.
type countedWebhooks struct {
	fixedWebhooks
	lists *atomic.Int64
}

func (c countedWebhooks) List(ctx context.Context) ([]webhook.Subscription, error) {
	c.lists.Add(1)
	return c.fixedWebhooks.List(ctx)
}

// The open /metrics computes lockapi_webhooks_blocked (a listing of the
// webhooks and a store call for each) at most once every 15 s, however
// many scrapes come, one after another or at once. Before, every scrape
// listed the webhooks and inspected each.
func TestMetrics_webhooksBlocked_computedOncePerInterval(t *testing.T) {
	sub := webhook.Subscription{ID: "01jd3z8q6w9m4t5r2k7x1b0c8n", URL: "https://hooks.example/x", Types: []lock.EventType{}, Source: webhook.SourceAPI, CreatedAt: time.Now()}
	var lists atomic.Int64
	e := MustOpenEnv(t, lockhttp.Config{Metrics: metrics.New(), Webhooks: countedWebhooks{fixedWebhooks{sub: sub}, &lists}})
	scrape := func() float64 { t.Helper(); return scrapeMetrics(t, e)["lockapi_webhooks_blocked"] }

	for i := range 10 {
		if got := scrape(); got != 0 {
			t.Fatalf("scrape %d: blocked %v", i, got)
		}
	}
	if n := lists.Load(); n != 1 {
		t.Fatalf("10 scrapes in a row listed the webhooks %d times, want 1", n)
	}

	// Once the value is 15 s old, the next scrapes, at once, compute it
	// once more, and see what changed.
	if _, err := e.Mem.TryAcquire(context.Background(), lock.AcquireRequest{Lock: webhook.LeaseName(sub.ID), Owner: "squatter", Principal: "team-b", TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	e.Server.AdvanceGaugeClock(15 * time.Second)
	var wg sync.WaitGroup
	got := make([]float64, 8)
	for i := range got {
		wg.Add(1)
		go func() { defer wg.Done(); got[i] = scrapeMetrics(t, e)["lockapi_webhooks_blocked"] }()
	}
	wg.Wait()
	for i, v := range got {
		if v != 1 {
			t.Fatalf("concurrent scrape %d: blocked %v, want 1", i, v)
		}
	}
	if n := lists.Load(); n != 2 {
		t.Fatalf("after the interval, 8 scrapes at once: %d listings in all, want 2", n)
	}
}
