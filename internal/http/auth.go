package http

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/lockapi/lockapi/internal/auth"
	"github.com/lockapi/lockapi/internal/lock"
	"github.com/lockapi/lockapi/internal/metrics"
)

// caller is who sent a request, as the authenticate middleware found out.
type caller struct {
	// key is the API key used; nil when the server runs open.
	key *auth.Key
	// principal names the caller for leases and limits: the key's
	// principal, or "" on an open server.
	principal string
}

// limitKey keys rate and waiter limits: the principal, or on an open server
// (and for the zero caller) the client's address. It is made when a limit
// asks, not for every request: most requests meet none.
func (c caller) limitKey(r *http.Request) string {
	if c.key != nil {
		return "principal:" + c.principal
	}
	return "addr:" + clientHost(r)
}

// callerOf returns the caller that authenticate found; the zero caller on
// a route it does not guard.
func callerOf(r *http.Request) caller {
	if sc := scopeOf(r.Context()); sc != nil {
		return sc.caller
	}
	return caller{}
}

// withCaller records c as r's caller in r's requestScope, which the
// requestID middleware put there before, or else a scope of its own.
func withCaller(r *http.Request, c caller) *http.Request {
	if sc := scopeOf(r.Context()); sc != nil {
		sc.caller = c
		return r
	}
	return r.WithContext(context.WithValue(r.Context(), scopeKey{}, &requestScope{caller: c}))
}

// authenticate identifies the caller of a /v1 route. With no keys configured
// everyone is let in as the anonymous principal; otherwise a valid,
// unexpired "Authorization: Bearer <key>" is required (auth.Keyring.Authenticate).
func (s *Server) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The dashboard asks in-process as its session's key, which it
		// does not hold: in force still, it authenticates the request.
		if key, ok := auth.KeyFrom(r.Context()); ok && s.cfg.Keys.Valid(key, time.Now()) {
			next.ServeHTTP(w, withCaller(r, caller{key: key, principal: key.Principal}))
			return
		}
		var c caller
		if s.cfg.Keys.Len() != 0 {
			values := r.Header.Values("Authorization")
			if len(values) > 1 {
				// Two credentials name no one caller: taking the first
				// would let a proxy's header and a client's disagree.
				w.Header().Set("WWW-Authenticate", `Bearer realm="lockapi", error="invalid_request"`)
				Error(w, r, &httpError{kindUnauthorized, "send one Authorization header, not several"})
				return
			}
			scheme, token, _ := strings.Cut(r.Header.Get("Authorization"), " ")
			if !strings.EqualFold(scheme, "Bearer") || token == "" {
				w.Header().Set("WWW-Authenticate", `Bearer realm="lockapi"`)
				Error(w, r, &httpError{kindUnauthorized, "this server needs an API key: send Authorization: Bearer <key>"})
				return
			}
			key, err := s.cfg.Keys.Authenticate(strings.TrimSpace(token), time.Now())
			if err != nil {
				// Unknown or expired (auth.ExpiredKeyError says when, not
				// the key): either way the token is no longer a credential.
				w.Header().Set("WWW-Authenticate", `Bearer realm="lockapi", error="invalid_token"`)
				Error(w, r, &httpError{kindUnauthorized, err.Error()})
				return
			}
			c = caller{key: key, principal: key.Principal}
		}
		next.ServeHTTP(w, withCaller(r, c))
	})
}

func clientHost(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// authorize checks that the caller has scope and, when name is not "", may
// use that lock name, by the one rule every front door applies
// (auth.Key.Allow): on an open server everything is allowed, but for the
// names lockapi keeps for itself (reserved), which nobody may use.
func authorize(c caller, scope auth.Scope, name string) error {
	if err := reserved(name); err != nil {
		return err
	}
	return c.key.Allow(scope, name)
}

// reserved refuses a lock name, or a prefix of names, that lockapi keeps
// for itself (lock.ReservedPrefix): to every caller, for every route but a
// force release, which frees a name that something took in spite of the
// rule (a webhook worker's lease; Webhook.WorkerLease).
func reserved(name string) error {
	if !lock.Reserved(name) {
		return nil
	}
	return &httpError{kindReserved, fmt.Sprintf("%q is a reserved name: names that begin with %q are lockapi's own", name, lock.ReservedPrefix)}
}

// leaseRef names a lease on behalf of the caller: renew and release are
// checked against the acquiring principal unless the caller is an admin.
func leaseRef(c caller, name, leaseID string) lock.LeaseRef {
	ref := lock.LeaseRef{Lock: name, ID: leaseID}
	if c.key != nil && !c.key.Has(auth.ScopeAdmin) {
		ref.Principal = c.principal
	}
	return ref
}

// releaseURL returns the signed release URL of a lease. It is valid for the
// server's maximum TTL from now: a lease that lives longer has been renewed,
// and every renewal answers with a fresh URL.
func (s *Server) releaseURL(l lock.Lease) string {
	return s.cfg.Release.ReleasePath(l.Lock, l.ID, time.Now().Add(s.cfg.MaxTTL))
}

// handleSignedRelease handles the "POST /v1/locks/{name}/leases/{lease_id}/release"
// route: a signed URL from a Lease's release_url releases every hold of that
// lease with no Authorization header, for CI systems and webhooks. The body,
// if any, is ignored (webhooks send their own payloads).
func (s *Server) handleSignedRelease(w http.ResponseWriter, r *http.Request) {
	name, leaseID, fields := leasePath(r)
	q := parseQuery(r)
	// A URL that lacks its parameters was cut, not tampered with.
	exp, given := q.str("exp")
	if _, err := strconv.ParseInt(exp, 10, 64); err != nil {
		if given && exp != "" {
			q.fail("exp", "must be an integer of Unix seconds (the URL's expiry)")
		} else {
			q.fail("exp", "is required: the URL's expiry, an integer of Unix seconds")
		}
	}
	sig, _ := q.str("sig")
	if sig == "" {
		q.fail("sig", "is required: the URL's signature")
	}
	q.fields = append(fields, q.fields...)
	if err := q.err(); err != nil {
		Error(w, r, err)
		return
	}
	if err := s.cfg.Release.Verify(name, leaseID, exp, sig, time.Now()); err != nil {
		Error(w, r, &lock.Error{Code: lock.CodeForbidden, Detail: err.Error()})
		return
	}
	res, err := s.store.Release(r.Context(), lock.LeaseRef{Lock: name, ID: leaseID}, true)
	if err == nil && res.Retried {
		// A signed URL is a one-shot capability: its replay must not look
		// like a release that happened now.
		err = &lock.Error{Code: lock.CodeLeaseLost, Detail: fmt.Sprintf("lease %q of lock %q was already released", leaseID, name)}
	}
	s.reportRelease(metrics.ReleaseSignedURL, res, err)
	if err != nil {
		Error(w, r, err)
		return
	}
	writeJSON(w, r, http.StatusOK, ReleaseResult{Lock: res.Lock, LeaseID: res.LeaseID, HoldCount: res.HoldCount, Released: res.Released})
}

// signedReleaseRoute is the route of handleSignedRelease, which authenticates
// by its signature rather than by API key.
const signedReleaseRoute = "/v1/locks/{name}/leases/{lease_id}/release"
