package ui

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/lockapi/lockapi/internal/auth"
	"github.com/lockapi/lockapi/internal/lock"
)

// cookieName is the session cookie. With API keys it holds a sealed
// session (seal.go): a random session id, the principal, a fingerprint of
// the key the user signed in with (never the key) and an expiry, under an
// HMAC keyed from the secret every instance shares, so a session works on
// every instance behind a load balancer and across restarts on Redis. On
// an open server it holds the session id alone.
const cookieName = "lockapi_ui"

// DefaultSessionTTL is how long a dashboard session lasts when Config
// says nothing.
const DefaultSessionTTL = 8 * time.Hour

// session is who uses the dashboard: a signed-in key, or anyone on an
// open server.
type session struct {
	// id is random, fresh at every sign-in: it binds the CSRF token to
	// this session, and signing out revokes it.
	id string
	// key is the configuration of the key signed in with, as in force
	// now; nil on an open server.
	key  *auth.Key
	open bool
	// expires is when the session ends; zero on an open server.
	expires time.Time
	// csrfKey keys the CSRF token.
	csrfKey []byte
}

// allow applies the API's authorization rule (auth.Key.Allow) to the
// session: the dashboard is a client of the same rules, with the same
// answers. On an open server the key is nil and everything is allowed.
func (s session) allow(scope auth.Scope, name string) error {
	if s.key == nil && !s.open {
		// Not reached: a session on a server with keys always has one.
		// Refuse rather than let a nil key read as an open server.
		return &lock.Error{Code: lock.CodeForbidden, Detail: "sign in first: this server needs an API key"}
	}
	return s.key.Allow(scope, name)
}

// may reports whether the session may use scope on name ("": on no name
// in particular), for what a page shows or offers.
func (s session) may(scope auth.Scope, name string) bool {
	return s.allow(scope, name) == nil
}

// csrf is the token every state-changing form of the session carries:
// an HMAC of the session id keyed from the server's secret, which only
// this session's cookie and the server know.
func (s session) csrf() string {
	m := hmac.New(sha256.New, s.csrfKey)
	m.Write([]byte("lockapi-ui-csrf\x00" + s.id))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// checkCSRF reports whether the posted form carries the session's token.
func (s session) checkCSRF(r *http.Request) bool {
	return hmac.Equal([]byte(r.PostFormValue("csrf")), []byte(s.csrf()))
}

func (h *Handler) open() bool { return h.keys.Len() == 0 }

// readSession returns the request's session, if its cookie holds a valid
// one: sealed by a secret of this server, not expired, not signed out,
// and of a key still configured and unexpired.
func (h *Handler) readSession(r *http.Request) (session, bool) {
	c, err := r.Cookie(cookieName)
	if err != nil {
		return session{}, false
	}
	if h.open() {
		if len(c.Value) != sessionIDLen {
			return session{}, false
		}
		return session{id: c.Value, open: true, csrfKey: h.csrfKey()}, true
	}
	s, ok := h.unseal(c.Value, time.Now())
	if !ok {
		return session{}, false
	}
	revoked, err := h.revoked.Revoked(r.Context(), s.id)
	if err != nil {
		// Fail closed: a session that cannot be checked is none.
		zerolog.Ctx(r.Context()).Error().Err(err).Msg("ui: cannot read session revocations")
		return session{}, false
	}
	return s, !revoked
}

// sessionIDLen is the length of an encoded session id (16 random bytes).
const sessionIDLen = 22

// startSession sets a fresh session's cookie for key (nil on an open
// server) and returns the session.
func (h *Handler) startSession(w http.ResponseWriter, r *http.Request, key *auth.Key) session {
	id := make([]byte, 16)
	_, _ = rand.Read(id) // crypto/rand does not fail on supported platforms
	s := session{id: base64.RawURLEncoding.EncodeToString(id), key: key, open: h.open(), csrfKey: h.csrfKey()}
	if s.open {
		setCookie(w, r, s.id, 0)
		return s
	}
	s.expires = time.Now().Add(h.sessionTTL)
	setCookie(w, r, h.seal(id, s.expires, key), int(h.sessionTTL/time.Second))
	return s
}

// setCookie sets the session cookie; maxAge < 0 deletes it, 0 keeps it for
// the browser session.
func setCookie(w http.ResponseWriter, r *http.Request, value string, maxAge int) {
	http.SetCookie(w, &http.Cookie{
		Name:     cookieName,
		Value:    value,
		Path:     "/ui/",
		MaxAge:   maxAge,
		HttpOnly: true,
		Secure:   r.TLS != nil,
		SameSite: http.SameSiteStrictMode,
	})
}

// withSession runs a handler with the request's session. With API keys, a
// request without a valid session is sent to sign in when it is a page
// (toPage), and answered 401 otherwise (what the pages' script fetches, and
// forms); on an open server a first visit gets a fresh session. A POST must
// carry the session's CSRF token.
func (h *Handler) withSession(toPage bool, next func(http.ResponseWriter, *http.Request, session)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s, ok := h.readSession(r)
		switch {
		case ok:
		case h.open() && r.Method == http.MethodGet:
			s = h.startSession(w, r, nil)
		case h.open():
			h.fail(w, r, http.StatusForbidden, "This form's session has ended: reload the page and try again.")
			return
		case toPage:
			http.Redirect(w, r, "/ui/signin?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
			return
		default:
			h.fail(w, r, http.StatusUnauthorized, "Sign in first: this server needs an API key.")
			return
		}
		if r.Method == http.MethodPost && !s.checkCSRF(r) {
			h.fail(w, r, http.StatusForbidden, "The form's CSRF token does not belong to this session: reload the page and try again.")
			return
		}
		next(w, r, s)
	}
}

// chrome is what every page shows around its content.
type chrome struct {
	Title     string
	Open      bool
	Principal string
	Scopes    string
	CSRF      string
	// Admin: the session may force-release (the locks its patterns cover).
	Admin  bool
	Notice string
}

func (h *Handler) chrome(s session, title string) chrome {
	c := chrome{Title: title, Open: s.open, CSRF: s.csrf(), Admin: s.may(auth.ScopeAdmin, "")}
	if s.key != nil {
		c.Principal = s.key.Principal
		scopes := make([]string, len(s.key.Scopes))
		for i, sc := range s.key.Scopes {
			scopes[i] = string(sc)
		}
		c.Scopes = strings.Join(scopes, ", ")
	}
	return c
}

// signInPage is the data of the sign-in page.
type signInPage struct {
	chrome
	Next  string
	Error string
}

// handleSignInPage handles the "GET /ui/signin" route.
func (h *Handler) handleSignInPage(w http.ResponseWriter, r *http.Request) {
	if h.open() {
		http.Redirect(w, r, "/ui/", http.StatusSeeOther)
		return
	}
	h.render(w, r, http.StatusOK, "signin", signInPage{chrome: chrome{Title: "Sign in"}, Next: safeNext(r.URL.Query().Get("next"))})
}

// handleSignIn handles the "POST /ui/signin" route: a valid API key starts
// a session.
func (h *Handler) handleSignIn(w http.ResponseWriter, r *http.Request) {
	if h.open() {
		http.Redirect(w, r, "/ui/", http.StatusSeeOther)
		return
	}
	apiKey := strings.TrimSpace(r.PostFormValue("key"))
	next := safeNext(r.PostFormValue("next"))
	key, err := h.keys.Authenticate(apiKey, time.Now())
	if err != nil {
		msg := "That API key is not valid here."
		var expired *auth.ExpiredKeyError
		if errors.As(err, &expired) {
			msg = "That API key expired at " + auth.FormatExpires(expired.At) + "."
		}
		h.render(w, r, http.StatusUnauthorized, "signin", signInPage{chrome: chrome{Title: "Sign in"}, Next: next, Error: msg})
		return
	}
	h.startSession(w, r, key)
	http.Redirect(w, r, next, http.StatusSeeOther)
}

// handleSignOut handles the "POST /ui/signout" route: the session is
// revoked on every instance (a copy of the cookie stops working too), and
// the browser forgets the cookie.
func (h *Handler) handleSignOut(w http.ResponseWriter, r *http.Request, s session) {
	if !s.open {
		if err := h.revoked.Revoke(r.Context(), s.id, s.expires); err != nil {
			zerolog.Ctx(r.Context()).Error().Err(err).Msg("ui: cannot record the sign-out")
			h.fail(w, r, http.StatusServiceUnavailable, "Signing out failed: the session could not be ended. Try again.")
			return
		}
	}
	setCookie(w, r, "", -1)
	http.Redirect(w, r, "/ui/signin", http.StatusSeeOther)
}

// safeNext returns where to go after signing in: a dashboard path, never
// another site.
func safeNext(next string) string {
	if !strings.HasPrefix(next, "/ui/") || strings.ContainsAny(next, "\\\r\n") {
		return "/ui/"
	}
	return next
}
