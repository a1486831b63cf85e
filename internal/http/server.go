// Package http is lockapi's HTTP/JSON API: the contract in openapi.yaml,
// served on top of a lock.Store.
package http

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/rs/zerolog"

	"github.com/lockapi/lockapi"
	"github.com/lockapi/lockapi/internal/auth"
	"github.com/lockapi/lockapi/internal/eventfeed"
	"github.com/lockapi/lockapi/internal/force"
	"github.com/lockapi/lockapi/internal/history"
	"github.com/lockapi/lockapi/internal/lock"
	"github.com/lockapi/lockapi/internal/metrics"
)

// Defaults for the zero fields of Config.
const (
	DefaultTTL     = 30 * time.Second
	DefaultMaxTTL  = 24 * time.Hour
	DefaultMaxWait = 60 * time.Second
	// DefaultEventsHeartbeat is how often an idle event stream gets a
	// keep-alive comment.
	DefaultEventsHeartbeat = 15 * time.Second
)

// MaxTTLCeiling bounds every server's MaxTTL, and so every ttl_ms:
// openapi.yaml gives it as ttl_ms's maximum. NewServer lowers a larger
// MaxTTL to it; lockapi serve refuses one.
const MaxTTLCeiling = 30 * 24 * time.Hour

// Timeouts and limits of the listening server. There is no read or write
// timeout on the whole request: long-poll acquires and blocking queries hold
// their request for up to MaxWait, event streams for as long as the client
// stays, and a read timeout would cancel them. An event stream bounds each
// of its writes instead.
const (
	DefaultHeaderTimeout = 10 * time.Second
	idleTimeout          = 120 * time.Second
	maxHeaderBytes       = 64 << 10
	// maxStreams is how many requests one HTTP/2 connection may have in
	// flight: enough for a client to park its waiters on a few connections.
	maxStreams = 1000
	// readyTimeout bounds the store ping of GET /readyz.
	readyTimeout = 2 * time.Second
)

// Config tunes a Server. Zero fields get the defaults.
type Config struct {
	DefaultTTL time.Duration // the TTL of an acquire without ttl_ms (30s)
	MaxTTL     time.Duration // the largest ttl_ms accepted (24h), at most MaxTTLCeiling
	MaxWait    time.Duration // longer wait_ms are clamped to this (60s)
	Logger     zerolog.Logger
	// MinReplicas is how many replicas must confirm a grant before it is
	// answered (Redis WAIT): the default of an acquire without
	// min_replicas, and the most one may ask for. 0: no confirmation.
	MinReplicas int

	// Keys are the API keys; with none the server runs open and every
	// request acts as the anonymous principal.
	Keys *auth.Keyring
	// Release signs and checks release URLs. The caller chooses its
	// secrets: cmd/lockapi takes LOCKAPI_RELEASE_SECRETS, the secret kept
	// in Redis, or a random one for the memory store.
	Release *auth.ReleaseSigner

	// MaxWaiters and MaxWaitersPerCaller cap concurrent waiting requests
	// (long-poll acquires and event streams): 10000 and 500 by default.
	MaxWaiters          int
	MaxWaitersPerCaller int
	// MaxWatches and MaxWatchesPerCaller cap concurrent blocking queries
	// (GET of a lock or a session with index), apart from the waiters: an
	// SDK watches every lease it holds with one, so a caller may have many.
	// 20000 and 10000 by default.
	MaxWatches          int
	MaxWatchesPerCaller int
	// RateLimit is each caller's sustained requests per second, RateBurst
	// its bucket size; 0 turns rate limiting off (the default).
	RateLimit float64
	RateBurst int
	// MaxSessionsPerPrincipal and MaxWebhooksPerPrincipal bound what one
	// principal (everyone, on an open server) may create that outlives a
	// request: live sessions and webhooks, 1000 and 100 by default. The
	// store counts them, over every instance.
	MaxSessionsPerPrincipal int
	MaxWebhooksPerPrincipal int

	// TLS, when set, makes Open serve HTTPS.
	TLS *tls.Config

	// Metrics, when set, records requests and waits and is served at
	// GET /metrics.
	Metrics *metrics.Metrics

	// BodyTimeout is how long a client has to send a request's body, from
	// the end of its header (30s; body.go).
	BodyTimeout time.Duration
	// HeaderTimeout is how long a client has to send a request's header
	// (10s), on a listener of Open; EventsWriteTimeout bounds each write
	// to an event stream (30s): a client that stops reading is cut off.
	HeaderTimeout      time.Duration
	EventsWriteTimeout time.Duration

	// EventsHeartbeat is how often GET /v1/events writes a keep-alive
	// comment to a stream with nothing to send (15s).
	EventsHeartbeat time.Duration
	// Events is the process's one reader of the store's event log, which
	// GET /v1/events shares with the webhook workers (cmd/lockapi makes
	// it, and closes it). Nil: the server reads store.Events() with a
	// feed of its own.
	Events *eventfeed.Feed
	// Webhooks serves /v1/webhooks; nil answers them 501
	// webhooks-disabled.
	Webhooks Webhooks
	// History is the window of Events that serves GET
	// /v1/locks/{name}/history and GET /v1/stats/locks (cmd/lockapi
	// starts it on the one feed); nil answers them 501 events-disabled.
	History *history.Window
}

// Defaults of the limits.
const (
	DefaultMaxWaiters          = 10000
	DefaultMaxWaitersPerCaller = 500
	DefaultMaxWatches          = 20000
	DefaultMaxWatchesPerCaller = 10000

	DefaultMaxSessionsPerPrincipal = 1000
	DefaultMaxWebhooksPerPrincipal = 100
)

// Server serves the API. Handler serves it on any listener (httptest); Open
// and Close run it on its own.
type Server struct {
	store  lock.Store
	cfg    Config
	log    zerolog.Logger
	router *chi.Mux

	waiters *waiterLimits // waiting acquires and event streams
	watches *waiterLimits // blocking queries
	rates   *rateLimits   // nil: no rate limit
	// events feeds GET /v1/events; nil when the store records no events.
	// ownEvents: the server made it, and closes it.
	events    *eventfeed.Feed
	ownEvents bool
	// force serves DELETE /v1/locks/{name}.
	force *force.Releaser
	// blockedGauge caches lockapi_webhooks_blocked (blockedWebhooks).
	blockedGauge *cachedGauge

	// closing is cancelled, with errShuttingDown, when Close begins, which
	// ends every wait.
	closing   context.Context
	stopWaits func()

	ln     net.Listener
	server *http.Server
	fresh  freshConns
	// parkLn serves a plain-text server and takes back the connections of
	// parked requests, counted in parked (park.go); nil under TLS.
	parkLn *parkListener
	parked parkedSet

	// panics counts the panics recovered: of handlers, and of waits.
	panics atomic.Int64
	// grantsReturned counts the waited grants given back because their
	// answer did not reach the client (giveBack).
	grantsReturned atomic.Int64
}

// withDefaults fills in the zero fields of cfg.
func (cfg Config) withDefaults() Config {
	if cfg.DefaultTTL <= 0 {
		cfg.DefaultTTL = DefaultTTL
	}
	if cfg.MaxTTL <= 0 {
		cfg.MaxTTL = DefaultMaxTTL
	}
	cfg.MaxTTL = min(cfg.MaxTTL, MaxTTLCeiling)
	if cfg.MaxWait <= 0 {
		cfg.MaxWait = DefaultMaxWait
	}
	if cfg.MaxWaiters <= 0 {
		cfg.MaxWaiters = DefaultMaxWaiters
	}
	if cfg.MaxWaitersPerCaller <= 0 {
		cfg.MaxWaitersPerCaller = DefaultMaxWaitersPerCaller
	}
	if cfg.MaxWatches <= 0 {
		cfg.MaxWatches = DefaultMaxWatches
	}
	if cfg.MaxWatchesPerCaller <= 0 {
		cfg.MaxWatchesPerCaller = DefaultMaxWatchesPerCaller
	}
	if cfg.MaxSessionsPerPrincipal <= 0 {
		cfg.MaxSessionsPerPrincipal = DefaultMaxSessionsPerPrincipal
	}
	if cfg.MaxWebhooksPerPrincipal <= 0 {
		cfg.MaxWebhooksPerPrincipal = DefaultMaxWebhooksPerPrincipal
	}
	if cfg.EventsHeartbeat <= 0 {
		cfg.EventsHeartbeat = DefaultEventsHeartbeat
	}
	if cfg.BodyTimeout <= 0 {
		cfg.BodyTimeout = DefaultBodyTimeout
	}
	if cfg.HeaderTimeout <= 0 {
		cfg.HeaderTimeout = DefaultHeaderTimeout
	}
	if cfg.EventsWriteTimeout <= 0 {
		cfg.EventsWriteTimeout = DefaultEventsWriteTimeout
	}
	return cfg
}

// NewServer returns a server for store.
func NewServer(store lock.Store, cfg Config) *Server {
	cfg = cfg.withDefaults()
	if cfg.Release == nil {
		// cmd/lockapi chooses the secret (configured, kept in Redis, or
		// random on the memory store); a server without one is a bug.
		panic("lockhttp: Config.Release is nil")
	}
	s := &Server{store: store, cfg: cfg, log: cfg.Logger,
		waiters: newWaiterLimits(cfg.MaxWaitersPerCaller, cfg.MaxWaiters, "waiting requests"),
		watches: newWaiterLimits(cfg.MaxWatchesPerCaller, cfg.MaxWatches, "blocking queries waiting"),
		force:   force.NewReleaser(store, cfg.Metrics)}
	if cfg.RateLimit > 0 {
		s.rates = newRateLimits(cfg.RateLimit, cfg.RateBurst)
	}
	s.blockedGauge = newCachedGauge(blockedWebhooksEvery, s.blockedWebhooks)
	closing, cancel := context.WithCancelCause(context.Background())
	s.closing, s.stopWaits = closing, func() { cancel(errShuttingDown) }
	s.events = cfg.Events
	if s.events == nil && store != nil {
		s.events, s.ownEvents = newEventFeed(store.Events(), cfg.Logger), true
	}

	r := chi.NewRouter()
	// HEAD is served wherever GET is (RFC 9110): chi's GetHead routes it to
	// the GET handler, and net/http drops the body.
	r.Use(routeEscaped, middleware.GetHead, s.readBodies, s.requestID, s.logRequests, s.recoverPanics)
	r.NotFound(s.handleNotFound)
	r.MethodNotAllowed(s.handleMethodNotAllowed)

	r.Group(func(r chi.Router) {
		r.Use(refuseCrossSite, s.authenticate, s.rateLimit)
		r.Post("/v1/locks/{name}/leases", s.handleAcquire)
		r.Post("/v1/locks/{name}/leases/{lease_id}/renew", s.handleRenew)
		r.Delete("/v1/locks/{name}/leases/{lease_id}", s.handleRelease)
		r.Patch("/v1/locks/{name}/leases/{lease_id}", s.handleUpdate)
		r.Get("/v1/locks/{name}", s.handleInspect)
		r.Get("/v1/locks/{name}/history", s.handleLockHistory)
		r.Get("/v1/stats/locks", s.handleLockStats)
		r.Delete("/v1/locks/{name}", s.handleForceRelease)
		r.Get("/v1/locks", s.handleList)
		r.Post("/v1/leases", s.handleAcquireAll)
		r.Delete("/v1/leases", s.handleReleaseAll)
		r.Post("/v1/sessions", s.handleCreateSession)
		r.Get("/v1/sessions", s.handleListSessions)
		r.Get("/v1/sessions/{id}", s.handleGetSession)
		r.Post("/v1/sessions/{id}/renew", s.handleRenewSession)
		r.Delete("/v1/sessions/{id}", s.handleDeleteSession)
		r.Get("/v1/events", s.handleEvents)
		r.Post("/v1/webhooks", s.handleCreateWebhook)
		r.Get("/v1/webhooks", s.handleListWebhooks)
		r.Get("/v1/webhooks/{id}", s.handleGetWebhook)
		r.Delete("/v1/webhooks/{id}", s.handleDeleteWebhook)
		r.Post("/v1/webhooks/{id}/ping", s.handlePingWebhook)
		r.Get("/v1/webhooks/{id}/dead-letters", s.handleDeadLetters)
		r.Post("/v1/webhooks/{id}/dead-letters/{event_id}/replay", s.handleReplayDeadLetter)
	})
	// The signed release URL carries its own authorization.
	r.With(s.rateLimit).Post(signedReleaseRoute, s.handleSignedRelease)

	if cfg.Metrics != nil {
		cfg.Metrics.Counter("lockapi_panics_total", "Panics recovered and answered 500, of handlers and of waits on either waiting path.", func() float64 { return float64(s.panics.Load()) })
		cfg.Metrics.Counter("lockapi_hangup_watch_failures_total", "Failures of the epoll wait that watches parked connections for their clients hanging up; each restarts the watch.", func() float64 { return float64(hangups.failures.Load()) })
		cfg.Metrics.Counter("lockapi_grants_returned_total", "Waited grants released because their answer could not be delivered: the write failed, or the client had hung up.", func() float64 { return float64(s.grantsReturned.Load()) })
		cfg.Metrics.Gauge("lockapi_waiters", "Requests waiting now: long-poll acquires, blocking queries and event streams.", func() float64 { return float64(s.waiters.Len() + s.watches.Len()) })
		cfg.Metrics.Gauge("lockapi_blocking_queries", "Blocking queries waiting now (GET of a lock or session with index), under their own limits; also counted in lockapi_waiters.", func() float64 { return float64(s.watches.Len()) })
		if cfg.Webhooks != nil && store != nil {
			cfg.Metrics.Gauge("lockapi_webhooks_blocked", "Webhooks whose worker lease something other than a webhook worker holds: they deliver nothing until it ends. Computed at most every 15 s.", s.blockedGauge.value)
		}
		r.Method(http.MethodGet, "/metrics", cfg.Metrics.Handler())
	}
	r.Get("/healthz", s.handleHealth)
	r.Get("/readyz", s.handleReady)
	r.Get("/openapi.yaml", s.handleOpenAPI)
	lockapi.OpenAPIJSON() // converted now, rather than by the first request
	r.Get("/openapi.json", s.handleOpenAPIJSON)
	s.router = r
	return s
}

// Handler returns the API's handler, with all middleware.
func (s *Server) Handler() http.Handler { return s.router }

// DashboardPath is where MountDashboard serves the dashboard.
const DashboardPath = "/ui/"

// MountDashboard serves h under /ui beside the API, behind the same
// middleware (request ids, logs, request metrics, panics), and sends the
// root there: a newcomer who opens the server's address in a browser lands
// on the dashboard. The API knows no more of h. Mount before serving.
func (s *Server) MountDashboard(h http.Handler) {
	s.router.Mount(strings.TrimSuffix(DashboardPath, "/"), h)
	s.router.Get("/", handleRoot)
}

// handleRoot handles the "GET /" route (HEAD too) once a dashboard is
// mounted: 302 Found to it. Temporary, not 308 Permanent: a browser keeps a
// permanent redirect for good, and the root may serve something else
// later (or sit behind a proxy that does) without clients stuck on /ui/.
// Other unknown paths stay problem+json 404s.
func handleRoot(w http.ResponseWriter, r *http.Request) {
	http.Redirect(w, r, DashboardPath, http.StatusFound)
}

// Open listens on addr (":0" picks a free port) and serves in the
// background.
func (s *Server) Open(addr string) (err error) {
	if s.ln, err = net.Listen("tcp", addr); err != nil {
		return err
	}
	// HTTP/2 lets one client multiplex many waiting requests on one
	// connection: a parked HTTP/1.1 request costs a connection with its own
	// read and write buffers, an HTTP/2 stream does not. Plain-text HTTP/2
	// (h2c) is spoken to clients that know to ask for it.
	protocols := new(http.Protocols)
	protocols.SetHTTP1(true)
	protocols.SetHTTP2(true)
	protocols.SetUnencryptedHTTP2(true)
	s.server = &http.Server{
		Handler:           s.router,
		ReadHeaderTimeout: s.cfg.HeaderTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          log.New(s.log.With().Str("component", "http").Logger(), "", 0),
		Protocols:         protocols,
		HTTP2:             &http.HTTP2Config{MaxConcurrentStreams: maxStreams},
		TLSConfig:         s.cfg.TLS,
		ConnState:         s.fresh.track,
	}
	s.server.RegisterOnShutdown(s.fresh.closeAll)
	ln := s.ln
	if s.cfg.TLS == nil {
		s.parkLn = newParkListener(s.ln, idleTimeout, s.closing)
		hangups.setLogger(&s.log)
		ln = s.parkLn
	}
	go func(srv *http.Server, ln net.Listener) {
		var err error
		if srv.TLSConfig != nil {
			err = srv.ServeTLS(ln, "", "") // the certificate is in TLSConfig
		} else {
			err = srv.Serve(ln)
		}
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error().Err(err).Msg("serve")
		}
	}(s.server, ln)
	return nil
}

// URL returns the base URL of the open server, e.g. http://127.0.0.1:8080.
// A wildcard listen address is reached on the loopback address.
func (s *Server) URL() string {
	if s.ln == nil {
		return ""
	}
	addr := s.ln.Addr().(*net.TCPAddr)
	host := "127.0.0.1"
	if !addr.IP.IsUnspecified() {
		host = addr.IP.String()
	}
	scheme := "http"
	if s.cfg.TLS != nil {
		scheme = "https"
	}
	return fmt.Sprintf("%s://%s", scheme, net.JoinHostPort(host, fmt.Sprint(addr.Port)))
}

// Close shuts the server down gracefully. Requests waiting for a lock or a
// change are answered at once with 503 unavailable and event streams end;
// other requests in flight may finish until ctx is done, after which
// connections are closed.
func (s *Server) Close(ctx context.Context) error {
	s.stopWaits()
	if s.ownEvents && s.events != nil {
		s.events.Close()
	}
	if s.server == nil {
		return nil
	}
	// Parked requests answer 503 and close their connections: Shutdown
	// does not know of them.
	parkedErr := s.parked.close(ctx)
	if err := s.server.Shutdown(ctx); err != nil {
		_ = s.server.Close()
		return err
	}
	return parkedErr
}

// freshConns are the connections that have not delivered a request yet.
// An HTTP client dials a spare connection now and then (Go's transport
// does, when another connection frees up first) and keeps it unused in its
// pool. net/http's Shutdown counts such a connection as busy until it is 5
// s old, so a Close with a shorter deadline failed although no request was
// open. Shutdown closes them at once: they carry no request, and the
// listener is already closed when it does.
type freshConns struct {
	mu    sync.Mutex
	conns map[net.Conn]struct{}
}

// track is the server's ConnState hook.
func (f *freshConns) track(c net.Conn, st http.ConnState) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if st != http.StateNew {
		delete(f.conns, c)
		return
	}
	if f.conns == nil {
		f.conns = make(map[net.Conn]struct{})
	}
	f.conns[c] = struct{}{}
}

// closeAll closes every connection that has not delivered a request.
func (f *freshConns) closeAll() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for c := range f.conns {
		_ = c.Close()
	}
	clear(f.conns)
}

// waitError explains why a wait on ctx failed: the server closing or the
// client leaving, rather than a bare context.Canceled.
func waitError(ctx context.Context, err error) error {
	if err != nil && ctx.Err() != nil {
		if cause := context.Cause(ctx); cause != nil {
			return cause
		}
	}
	return err
}

// handleNotFound answers requests for routes that do not exist. A path under
// /v1/locks/ whose second segment is not "leases" carries a lock name with a
// '/' in it ("team/deploy"): that caller needs the lock-name rule, not a bare
// "no route". (/v1/locks/busy/leases/L/extend is an unknown route on a good
// name, and stays a 404.)
func (s *Server) handleNotFound(w http.ResponseWriter, r *http.Request) {
	path := r.URL.EscapedPath()
	if rest, ok := strings.CutPrefix(path, "/v1/locks/"); ok && slashInName(rest) {
		rule := lock.CheckName("name", "/").Detail
		Error(w, r, lock.Invalid(lock.FieldError{Field: "name",
			Detail: rule + "; '/' separates the path's segments, so a name cannot hold one (write team:deploy rather than team/deploy)"}))
		return
	}
	Error(w, r, &httpError{kindNotFound, fmt.Sprintf("there is no route %s", path)})
}

// slashInName reports whether the rest of a /v1/locks/ path that matched no
// route is a lock name with a '/' rather than a known route shape.
func slashInName(rest string) bool {
	segs := strings.Split(rest, "/")
	return len(segs) > 1 && segs[1] != "leases" && segs[1] != ""
}

// allMethods are the methods checked for the Allow header of a 405.
var allMethods = []string{
	http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut,
	http.MethodPatch, http.MethodDelete, http.MethodOptions,
}

// handleMethodNotAllowed answers a known route asked with a wrong method,
// listing the route's methods in Allow: HEAD with GET.
func (s *Server) handleMethodNotAllowed(w http.ResponseWriter, r *http.Request) {
	var allowed []string
	for _, m := range allMethods {
		get := m == http.MethodHead && slices.Contains(allowed, http.MethodGet)
		if get || s.router.Match(chi.NewRouteContext(), m, r.URL.EscapedPath()) {
			allowed = append(allowed, m)
		}
	}
	w.Header().Set("Allow", strings.Join(allowed, ", "))
	Error(w, r, &httpError{kindMethod, fmt.Sprintf("method %s is not allowed here; allowed: %s", r.Method, strings.Join(allowed, ", "))})
}
