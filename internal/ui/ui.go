// Package ui is lockapi's admin dashboard, served at /ui/: server-rendered
// pages (html/template) of the held locks, of one lock's holders and
// events, and an admin's force release behind a confirmation. A little
// JavaScript (static/app.js, never inline: the Content-Security-Policy
// forbids it) counts TTLs down, refreshes the pages and follows the live
// event feed. Templates, script and stylesheet are embedded in the binary.
//
// The dashboard is a client of the API's rules: it reads the lock.Store,
// authorizes with the API's keys by the API's rule (auth.Key.Allow), and
// force-releases through the API's service (internal/force), so a key's
// scopes and name patterns decide what it shows and does, and a release
// is counted, as on the API. The Activity page, a lock's timeline and the
// Sessions page ask the API itself, in-process and as the session's key
// (apicall.go). cmd/lockapi mounts it beside the API. Signing in with a key starts a
// sealed session (seal.go) that names the key by a fingerprint, never
// holds it, and ends at its expiry, at sign-out, or when the key leaves
// the configuration or expires; on a server without keys the dashboard is
// open, as the API is.
package ui

import (
	"embed"
	"html/template"
	"io/fs"
	"net/http"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/lockapi/lockapi/internal/auth"
	"github.com/lockapi/lockapi/internal/force"
	"github.com/lockapi/lockapi/internal/lock"
)

//go:embed templates static
var files embed.FS

// contentSecurityPolicy allows only the dashboard's own script, stylesheet
// and connections: no inline script or style, no framing.
const contentSecurityPolicy = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; " +
	"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'; object-src 'none'"

// Handler serves the dashboard under /ui/.
type Handler struct {
	store lock.Store
	keys  *auth.Keyring
	// api serves the JSON API: the live feed is its GET /v1/events, asked
	// with the session's key.
	api http.Handler
	// force is the API's force release: the confirmation form calls it,
	// and it checks and counts the release as DELETE /v1/locks/{name}
	// does.
	force *force.Releaser
	// webhooks serves the webhooks page; nil: no webhooks.
	webhooks Webhooks
	pages    map[string]*template.Template
	next     http.Handler

	// secrets seal the sessions; sessionTTL is how long one lasts, and
	// revoked the sessions signed out.
	secrets    *auth.ReleaseSigner
	sessionTTL time.Duration
	revoked    auth.Revocations
	// feedCheck is how often a live feed checks that its session was not
	// signed out (feedContext); tests shorten it.
	feedCheck time.Duration
}

// defaultFeedCheck is how often a live feed checks that its session was
// not signed out.
const defaultFeedCheck = 5 * time.Second

// Config is what the dashboard is a client of. Store, API and Force are
// required.
type Config struct {
	// Store is what the pages read: locks and their state.
	Store lock.Store
	// Keys are the API's keys; none: the dashboard is open, as the API is.
	Keys *auth.Keyring
	// API is the API's handler, which serves the event stream the live
	// feed shows.
	API http.Handler
	// Force is the force release the API serves, shared so that both
	// fronts answer and count it alike.
	Force *force.Releaser
	// Webhooks, when not nil, is the webhook service whose subscriptions
	// the webhooks page lists.
	Webhooks Webhooks
	// Secrets seal the sessions: the release URLs' signer, whose secrets
	// every instance shares. Nil: a random secret of this process.
	Secrets *auth.ReleaseSigner
	// SessionTTL is how long a session lasts from sign-in; 0:
	// DefaultSessionTTL.
	SessionTTL time.Duration
	// Revocations record sign-outs for every instance; nil: this
	// process's only.
	Revocations auth.Revocations
}

// New returns the dashboard of cfg.
func New(cfg Config) *Handler {
	if cfg.Store == nil || cfg.API == nil || cfg.Force == nil {
		panic("ui: Config needs Store, API and Force")
	}
	h := &Handler{store: cfg.Store, keys: cfg.Keys, api: cfg.API, force: cfg.Force, webhooks: cfg.Webhooks, pages: map[string]*template.Template{},
		secrets: cfg.Secrets, sessionTTL: cfg.SessionTTL, revoked: cfg.Revocations, feedCheck: defaultFeedCheck}
	if h.secrets == nil {
		h.secrets, _ = auth.NewReleaseSigner(auth.RandomSecret())
	}
	if h.sessionTTL <= 0 {
		h.sessionTTL = DefaultSessionTTL
	}
	if h.revoked == nil {
		h.revoked = auth.MemoryRevocations()
	}
	for _, name := range []string{"signin", "locks", "lock", "confirm", "error", "webhooks", "deadletters", "activity", "sessions"} {
		h.pages[name] = template.Must(template.New("").Funcs(funcs).ParseFS(files, "templates/layout.html", "templates/"+name+".html"))
	}

	mux := http.NewServeMux()
	mux.HandleFunc("GET /ui", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/ui/", http.StatusMovedPermanently)
	})
	mux.HandleFunc("/ui/", func(w http.ResponseWriter, r *http.Request) {
		h.fail(w, r, http.StatusNotFound, "There is no such page.")
	})
	static, _ := fs.Sub(files, "static")
	mux.Handle("GET /ui/static/", http.StripPrefix("/ui/static/", http.FileServerFS(static)))

	mux.HandleFunc("GET /ui/signin", h.handleSignInPage)
	mux.HandleFunc("POST /ui/signin", h.handleSignIn)
	mux.HandleFunc("POST /ui/signout", h.withSession(false, h.handleSignOut))
	// Pages.
	mux.HandleFunc("GET /ui/{$}", h.withSession(true, h.handleLocks))
	mux.HandleFunc("GET /ui/lock", h.withSession(true, h.handleGoTo))
	mux.HandleFunc("GET /ui/locks/{name}", h.withSession(true, h.handleLock))
	mux.HandleFunc("GET /ui/locks/{name}/release", h.withSession(true, h.handleConfirm))
	mux.HandleFunc("POST /ui/locks/{name}/release", h.withSession(false, h.handleForceRelease))
	mux.HandleFunc("GET /ui/webhooks", h.withSession(true, h.handleWebhooks))
	mux.HandleFunc("GET /ui/activity", h.withSession(true, h.handleActivity))
	mux.HandleFunc("GET /ui/sessions", h.withSession(true, h.handleSessions))
	mux.HandleFunc("POST /ui/sessions/{id}/end", h.withSession(false, h.handleEndSession))
	mux.HandleFunc("GET /ui/webhooks/{id}/dead-letters", h.withSession(true, h.handleDeadLetters))
	// What the pages' script fetches.
	mux.HandleFunc("GET /ui/rows", h.withSession(false, h.handleRows))
	mux.HandleFunc("GET /ui/locks/{name}/state", h.withSession(false, h.handleLockState))
	mux.HandleFunc("GET /ui/events", h.withSession(false, h.handleEvents))

	// Beside the CSRF token of every form: refuse state-changing requests
	// a browser marks as cross-origin, the sign-in form included.
	h.next = http.NewCrossOriginProtection().Handler(mux)
	return h
}

// ServeHTTP sets the headers every dashboard response carries and serves
// the request.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	hd.Set("Content-Security-Policy", contentSecurityPolicy)
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("X-Frame-Options", "DENY")
	// Lock names are in the dashboard's URLs.
	hd.Set("Referrer-Policy", "no-referrer")
	if strings.HasPrefix(r.URL.Path, "/ui/static/") {
		hd.Set("Cache-Control", "no-cache")
	} else {
		hd.Set("Cache-Control", "no-store")
	}
	h.next.ServeHTTP(w, r)
}

// render writes page with status.
func (h *Handler) render(w http.ResponseWriter, r *http.Request, status int, page string, data any) {
	h.execute(w, r, status, h.pages[page], "layout", data)
}

// execute runs one template of a page's set: "layout" for the whole page,
// or a fragment that the page's script refreshes.
func (h *Handler) execute(w http.ResponseWriter, r *http.Request, status int, t *template.Template, name string, data any) {
	var b strings.Builder
	if err := t.ExecuteTemplate(&b, name, data); err != nil {
		zerolog.Ctx(r.Context()).Error().Err(err).Str("template", name).Msg("ui: render")
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(b.String()))
}

// errorPage is the data of the error page.
type errorPage struct {
	chrome
	Status  int
	Message string
}

// fail answers with the error page.
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, status int, msg string) {
	h.render(w, r, status, "error", errorPage{chrome: chrome{Title: http.StatusText(status), Open: h.open()}, Status: status, Message: msg})
}

// failErr answers a store error: its detail is safe to show, its cause
// goes to the log.
func (h *Handler) failErr(w http.ResponseWriter, r *http.Request, err error) {
	e := lock.AsError(err)
	status := http.StatusInternalServerError
	switch e.Code {
	case lock.CodeInvalid:
		status = http.StatusBadRequest
	case lock.CodeForbidden:
		status = http.StatusForbidden
	case lock.CodeUnavailable:
		status = http.StatusServiceUnavailable
	}
	if status >= 500 {
		zerolog.Ctx(r.Context()).Error().Err(err).Msg("ui: store")
	}
	h.fail(w, r, status, e.Detail)
}
