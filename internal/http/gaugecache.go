package http

import (
	"sync"
	"time"
)

// blockedWebhooksEvery is how long a lockapi_webhooks_blocked value
// serves the scrapes that follow it: /metrics is open, and the value costs
// a listing of the webhooks and a store call for each.
const blockedWebhooksEvery = 15 * time.Second

// cachedGauge is a gauge's value computed at most once every `every`, by
// at most one scrape at a time: the scrapes that come while it is computed
// wait for it and then share it.
type cachedGauge struct {
	every   time.Duration
	compute func() float64

	mu    sync.Mutex
	now   func() time.Time // time.Now; tests move it
	at    time.Time        // when val was computed; zero before the first
	val   float64
	valid bool
}

func newCachedGauge(every time.Duration, compute func() float64) *cachedGauge {
	return &cachedGauge{every: every, compute: compute, now: time.Now}
}

// value is the gauge's value, computed now if the last one is older than
// every.
func (g *cachedGauge) value() float64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	if now := g.now(); !g.valid || now.Sub(g.at) >= g.every || now.Before(g.at) {
		g.val, g.at, g.valid = g.compute(), now, true
	}
	return g.val
}
