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

	"github.com/lockapi/lockapi/internal/auth"
	"github.com/lockapi/lockapi/internal/lock"
)

// cookieName is the session cookie. It holds a random session id and, when
// the server has API keys, the key the user signed in with: the dashboard
// keeps no state of its own, so a session works on every instance behind a
// load balancer and survives restarts while the key stays configured.
const cookieName = "lockapi_ui"

// session is who uses the dashboard: a signed-in key, or anyone on an
// open server.
type session struct {
	// id is random, fresh at every sign-in: it binds the CSRF token to
	// this session.
	id string
	// apiKey is the key as given at sign-in, key its configuration; both
	// are empty on an open server.
	apiKey string
	key    *auth.Key
	open   bool
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
// an HMAC of the session id keyed with the API key, which only this
// session's cookie and the key's holder know. On an open server the key
// is empty and the token a double-submit of the session cookie.
func (s session) csrf() string {
	m := hmac.New(sha256.New, []byte(s.apiKey))
	m.Write([]byte("lockapi-ui-csrf\x00" + s.id))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// checkCSRF reports whether the posted form carries the session's token.
func (s session) checkCSRF(r *http.Request) bool {
	return hmac.Equal([]byte(r.PostFormValue("csrf")), []byte(s.csrf()))
}

func (h *Handler) open() bool { return h.keys.Len() == 0 }

// readSession returns the request's session, if its cookie holds a valid one.
func (h *Handler) readSession(r *http.Request) (session, bool) {
	c, err := r.Cookie(cookieName)
	if err != nil {
		return session{}, false
	}
	id, enc, _ := strings.Cut(c.Value, ".")
	if len(id) != sessionIDLen {
		return session{}, false
	}
	if h.open() {
		return session{id: id, open: true}, true
	}
	apiKey, err := base64.RawURLEncoding.DecodeString(enc)
	if err != nil {
		return session{}, false
	}
	// A key that expired since sign-in ends the session: the cookie holds
	// the key, and the key is checked by the API's rule on every request.
	key, err := h.keys.Authenticate(string(apiKey), time.Now())
	if err != nil {
		return session{}, false
	}
	return session{id: id, apiKey: string(apiKey), key: key}, true
}

// sessionIDLen is the length of an encoded session id (16 random bytes).
const sessionIDLen = 22

// startSession sets a fresh session's cookie for apiKey ("" on an open
// server) and returns the session.
func (h *Handler) startSession(w http.ResponseWriter, r *http.Request, apiKey string, key *auth.Key) session {
	b := make([]byte, 16)
	_, _ = rand.Read(b) // crypto/rand does not fail on supported platforms
	s := session{id: base64.RawURLEncoding.EncodeToString(b), apiKey: apiKey, key: key, open: h.open()}
	value := s.id
	if !s.open {
		value += "." + base64.RawURLEncoding.EncodeToString([]byte(apiKey))
	}
	setCookie(w, r, value, 0)
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
			s = h.startSession(w, r, "", nil)
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
	h.startSession(w, r, apiKey, key)
	http.Redirect(w, r, next, http.StatusSeeOther)
}

// handleSignOut handles the "POST /ui/signout" route.
func (h *Handler) handleSignOut(w http.ResponseWriter, r *http.Request, _ session) {
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
