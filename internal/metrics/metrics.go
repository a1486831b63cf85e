// Package metrics defines lockapi's Prometheus metrics, with the official
// client library. Labels are bounded: route patterns, methods, statuses,
// outcomes and script names, never lock names (one series per lock would
// grow without bound).
package metrics

import (
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/lockapi/lockapi/internal/layout"
)

// Metrics holds every series lockapi exports. A nil *Metrics is valid and
// records nothing, so callers need no checks when metrics are off.
type Metrics struct {
	reg *prometheus.Registry

	requests     *prometheus.CounterVec
	duration     *prometheus.HistogramVec
	grants       map[GrantKind]prometheus.Counter
	releases     map[ReleaseKind]prometheus.Counter
	conflicts    prometheus.Counter
	leaseLost    prometheus.Counter
	waitDuration *prometheus.HistogramVec
	scripts      *prometheus.HistogramVec
	webhooks     *prometheus.CounterVec
	layouts      map[layout.Kind]prometheus.Counter

	// observers caches the request series of each (route, method, status):
	// WithLabelValues hashes its labels on every call.
	observers sync.Map // requestLabels -> *requestSeries
}

type requestLabels struct {
	route, method string
	status        int
}

type requestSeries struct {
	count    prometheus.Counter
	duration prometheus.Observer
}

// New registers lockapi's series and the Go and process collectors (RSS,
// goroutines) in a fresh registry.
func New() *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry()}
	m.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	f := factory{m.reg}
	m.requests = f.counterVec("lockapi_http_requests_total", "HTTP requests by route pattern, method and status.", "route", "method", "status")
	m.duration = f.histogramVec("lockapi_http_request_duration_seconds", "HTTP request duration by route pattern, method and status, waits included.",
		[]float64{.0002, .0005, .001, .002, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}, "route", "method", "status")
	grants := f.counterVec("lockapi_grants_total", "Leases granted: kind fresh (a new token) or reentrant.", "kind")
	m.grants = map[GrantKind]prometheus.Counter{}
	for _, k := range []GrantKind{GrantFresh, GrantReentrant} {
		m.grants[k] = grants.WithLabelValues(string(k))
	}
	releases := f.counterVec("lockapi_releases_total", "Releases that dropped a hold or freed a lock: kind lease, signed_url or force.", "kind")
	m.releases = map[ReleaseKind]prometheus.Counter{}
	for _, k := range []ReleaseKind{ReleaseLease, ReleaseSignedURL, ReleaseForce} {
		m.releases[k] = releases.WithLabelValues(string(k))
	}
	m.conflicts = f.counter("lockapi_conflicts_total", "Acquires answered 409 because another owner held the lock.")
	m.leaseLost = f.counter("lockapi_lease_lost_total", "Renews and releases answered 410 because the lease no longer held the lock.")
	m.waitDuration = f.histogramVec("lockapi_wait_duration_seconds", "How long waiting acquires waited, by outcome: granted, timeout, cancelled, shutdown or error.",
		[]float64{.001, .005, .01, .05, .1, .5, 1, 5, 10, 30, 60}, "outcome")
	m.scripts = f.histogramVec("lockapi_store_script_duration_seconds", "Redis script round trips by script.",
		[]float64{.0001, .0002, .0005, .001, .002, .005, .01, .025, .05, .1, .5, 1}, "script")
	m.webhooks = f.counterVec("lockapi_webhook_deliveries_total", "Webhook delivery attempts by outcome: delivered, rejected (a non-2xx answer), unreachable, refused (a destination not allowed); dead_lettered counts events given up.", "outcome")
	layouts := f.counterVec("lockapi_unknown_layout_total", "Records read from Redis in a layout this version does not know (written by a newer one), by kind: events, sessions, webhooks, leases (docs/UPGRADING.md).", "kind")
	m.layouts = map[layout.Kind]prometheus.Counter{}
	for _, k := range layout.Kinds {
		m.layouts[k] = layouts.WithLabelValues(string(k))
	}
	return m
}

type factory struct{ reg *prometheus.Registry }

func (f factory) counterVec(name, help string, labels ...string) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
	f.reg.MustRegister(c)
	return c
}

func (f factory) counter(name, help string) prometheus.Counter {
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
	f.reg.MustRegister(c)
	return c
}

func (f factory) histogramVec(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, labels)
	f.reg.MustRegister(h)
	return h
}

// Handler serves the registry in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// Gauge registers a gauge whose value is read from fn at scrape time.
func (m *Metrics) Gauge(name, help string, fn func() float64) {
	if m != nil {
		m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, fn))
	}
}

// Counter registers a counter whose value is read from fn at scrape time.
func (m *Metrics) Counter(name, help string, fn func() float64) {
	if m != nil {
		m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, fn))
	}
}

// Request records one HTTP request by route pattern, method and status.
// What the request did to a lock is not read from these: the handler that
// knows reports it (Grant, Conflict, LeaseLost, Release). A client chooses
// the method, so a method not in RFC 9110 counts as "other": every label
// value is one the server chose.
func (m *Metrics) Request(route, method string, status int, d time.Duration) {
	if m == nil {
		return
	}
	method = methodLabel(method)
	key := requestLabels{route, method, status}
	s, ok := m.observers.Load(key)
	if !ok {
		code := strconv.Itoa(status)
		s, _ = m.observers.LoadOrStore(key, &requestSeries{
			count:    m.requests.WithLabelValues(route, method, code),
			duration: m.duration.WithLabelValues(route, method, code),
		})
	}
	rs := s.(*requestSeries)
	rs.count.Inc()
	rs.duration.Observe(d.Seconds())
}

// methodLabel is method's label value: itself if RFC 9110 defines it (or
// PATCH), else "other".
func methodLabel(method string) string {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodConnect, http.MethodOptions, http.MethodTrace:
		return method
	}
	return "other"
}

// GrantKind is how a lease was granted, the kind label of
// lockapi_grants_total.
type GrantKind string

const (
	GrantFresh     GrantKind = "fresh"     // the lock went from free to held, with a new token
	GrantReentrant GrantKind = "reentrant" // its holder acquired it again: one more hold
)

// ReleaseKind is how a release was asked for, the kind label of
// lockapi_releases_total.
type ReleaseKind string

const (
	ReleaseLease     ReleaseKind = "lease"      // by the lease's holder, with its lease id
	ReleaseSignedURL ReleaseKind = "signed_url" // with the lease's signed release URL
	ReleaseForce     ReleaseKind = "force"      // by an admin, whoever held the lock
)

// Grant records a lease granted.
func (m *Metrics) Grant(kind GrantKind) {
	if m != nil {
		m.grants[kind].Inc()
	}
}

// Conflict records an acquire refused because another owner held the lock.
func (m *Metrics) Conflict() {
	if m != nil {
		m.conflicts.Inc()
	}
}

// LeaseLost records a renew or release refused because its lease no longer
// held the lock.
func (m *Metrics) LeaseLost() {
	if m != nil {
		m.leaseLost.Inc()
	}
}

// Release records a release that freed a hold or a lock.
func (m *Metrics) Release(kind ReleaseKind) {
	if m != nil {
		m.releases[kind].Inc()
	}
}

// Wait records how long a waiting acquire waited and how it ended.
func (m *Metrics) Wait(d time.Duration, outcome string) {
	if m != nil {
		m.waitDuration.WithLabelValues(outcome).Observe(d.Seconds())
	}
}

// Script records one Redis script round trip.
func (m *Metrics) Script(name string, d time.Duration) {
	if m != nil {
		m.scripts.WithLabelValues(name).Observe(d.Seconds())
	}
}

// WebhookDelivery records one webhook delivery attempt, or one event given
// up, by outcome.
func (m *Metrics) WebhookDelivery(outcome string) {
	if m != nil {
		m.webhooks.WithLabelValues(outcome).Inc()
	}
}

// UnknownLayout counts a record of kind whose layout this version does not
// know (layout.Reporter).
func (m *Metrics) UnknownLayout(kind layout.Kind) {
	if m != nil {
		if c, ok := m.layouts[kind]; ok {
			c.Inc()
		}
	}
}
