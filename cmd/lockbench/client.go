package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// client is the HTTP side shared by every mode: one tuned Transport, the
// server's base URL and the API key.
//
// The Transport is tuned so that the tool is not what gets measured: every
// concurrent client keeps its own idle keep-alive connection (the default of
// two idle connections per host would make most requests dial anew), no
// gzip (responses are tiny and Accept-Encoding would only cost CPU), no
// proxy lookup, and HTTP/1.1, which is what the server speaks in plain text.
type client struct {
	base string // "http://host:port", no trailing slash
	auth string // "Bearer <key>", or "" for an open server
	tr   *http.Transport
	hc   *http.Client
}

// newClient returns a client for server that keeps up to conns idle
// connections. With h2c it speaks plain-text HTTP/2 and multiplexes its
// requests on a few connections.
func newClient(server, key string, conns int, h2c bool) (*client, error) {
	u, err := url.Parse(server)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("-server %q: want a URL like http://127.0.0.1:8080", server)
	}
	tr := &http.Transport{
		DialContext: (&net.Dialer{
			Timeout:   5 * time.Second,
			KeepAlive: 30 * time.Second,
		}).DialContext,
		MaxIdleConns:        0, // no overall cap; the per-host cap below is the one that matters
		MaxIdleConnsPerHost: max(conns, 2),
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
		ForceAttemptHTTP2:   false,
		TLSHandshakeTimeout: 5 * time.Second,
	}
	if h2c {
		tr.Protocols = new(http.Protocols)
		tr.Protocols.SetUnencryptedHTTP2(true)
	}
	c := &client{base: strings.TrimRight(server, "/"), tr: tr}
	if key != "" {
		c.auth = "Bearer " + key
	}
	c.hc = &http.Client{
		Transport: tr,
		// The API never redirects; a redirect means a wrong -server.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return c, nil
}

// connect returns a client of the configured server that keeps up to conns
// connections, once the server has answered the preflight checks.
func (cfg *config) connect(ctx context.Context, conns int) (*client, error) {
	cl, err := newClient(cfg.server, cfg.key, conns, cfg.h2c)
	if err != nil {
		return nil, err
	}
	if err := preflight(ctx, cl, cfg); err != nil {
		cl.close()
		return nil, err
	}
	return cl, nil
}

// close drops the idle connections.
func (c *client) close() { c.tr.CloseIdleConnections() }

// session is one benchmark client's reusable request state: its JSON body
// and the buffer responses are read into, so that a cycle allocates only
// what net/http itself does. Not safe for concurrent use.
type session struct {
	c      *client
	multi  int    // names per multi-lock acquire; 0 for single acquires
	body   []byte // the acquire body
	rd     bytes.Reader
	buf    bytes.Buffer
	header http.Header // for requests with a JSON body
	bare   http.Header // for GET and DELETE: no Content-Type
}

// newSession returns a session whose acquires send body.
func (c *client) newSession(body []byte) *session {
	return c.newKindSession(body, lockKind{})
}

// newKindSession returns a session whose acquires send body, as kind says.
func (c *client) newKindSession(body []byte, kind lockKind) *session {
	h, bare := http.Header{"Content-Type": {"application/json"}}, http.Header{}
	if c.auth != "" {
		h.Set("Authorization", c.auth)
		bare.Set("Authorization", c.auth)
	}
	s := &session{c: c, body: body, header: h, bare: bare}
	if kind.name == "multi" {
		s.multi = kind.names
	}
	return s
}

// acquireBody is the JSON of an acquire: a distinct owner per client, so that
// two clients picking the same name collide (409) instead of re-entering each
// other's lease. kind adds what the lock kind under test needs.
func acquireBody(owner string, ttl time.Duration, waitMs int64, kind lockKind) []byte {
	b := map[string]any{"owner": owner, "ttl_ms": ttl.Milliseconds()}
	if waitMs > 0 {
		b["wait_ms"] = waitMs
	}
	switch kind.name {
	case "shared":
		b["mode"] = "shared"
	case "semaphore":
		b["limit"] = kind.limit
	case "fair":
		b["fair"] = true
	}
	out, _ := json.Marshal(b)
	return out
}

// lockKind is the kind of lock a run takes (-kind): "lock", "shared",
// "semaphore" (with limit permits), "fair", or "multi" (names names at once,
// all or nothing, through POST /v1/leases).
type lockKind struct {
	name  string
	limit int
	names int
}

// reply is what a caller needs of a response. body is valid until the
// session's next request.
type reply struct {
	status  int
	leaseID string // of a granted acquire
	body    []byte
}

// acquire posts the session's body to acquire name. A multi-lock session
// takes name:0, name:1, ... at once; its leaseID is then the query of the
// release (id=name:0/<id>&...).
func (s *session) acquire(ctx context.Context, name string) (reply, error) {
	if s.multi > 0 {
		return s.acquireMulti(ctx, name)
	}
	s.rd.Reset(s.body)
	rep, err := s.do(ctx, http.MethodPost, "/v1/locks/"+name+"/leases", &s.rd, int64(len(s.body)))
	if err != nil || (rep.status != http.StatusCreated && rep.status != http.StatusOK) {
		return rep, err
	}
	rep.leaseID = leaseIDOf(rep)
	if rep.leaseID == "" {
		return rep, fmt.Errorf("acquire %s: %d without a lease id: %s", name, rep.status, snippet(rep.body))
	}
	return rep, nil
}

func (s *session) acquireMulti(ctx context.Context, name string) (reply, error) {
	var b bytes.Buffer
	b.WriteString(`{"locks":[`)
	for i := range s.multi {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"%s:%d"`, name, i)
	}
	b.WriteString("],")
	b.Write(s.body[1:]) // the rest of the acquire body, after its '{'
	rep, err := s.do(ctx, http.MethodPost, "/v1/leases", bytes.NewReader(b.Bytes()), int64(b.Len()))
	if err != nil || rep.status != http.StatusCreated {
		return rep, err
	}
	var got struct {
		Leases []struct {
			Lock    string `json:"lock"`
			LeaseID string `json:"lease_id"`
		} `json:"leases"`
	}
	if err := json.Unmarshal(rep.body, &got); err != nil || len(got.Leases) != s.multi {
		return rep, fmt.Errorf("multi-lock acquire %s: %d with %d leases: %s", name, rep.status, len(got.Leases), snippet(rep.body))
	}
	q := url.Values{}
	for _, l := range got.Leases {
		q.Add("id", l.Lock+"/"+l.LeaseID)
	}
	rep.leaseID = q.Encode()
	return rep, nil
}

// release deletes one hold of a lease, or every lease of a multi-lock.
func (s *session) release(ctx context.Context, name, leaseID string) (reply, error) {
	if s.multi > 0 {
		return s.do(ctx, http.MethodDelete, "/v1/leases?"+leaseID, nil, 0)
	}
	return s.do(ctx, http.MethodDelete, "/v1/locks/"+name+"/leases/"+leaseID, nil, 0)
}

// renew resets a lease's TTL.
func (s *session) renew(ctx context.Context, name, leaseID string, ttl time.Duration) (reply, error) {
	b := []byte(`{"ttl_ms":` + strconv.FormatInt(ttl.Milliseconds(), 10) + `}`)
	return s.do(ctx, http.MethodPost, "/v1/locks/"+name+"/leases/"+leaseID+"/renew", bytes.NewReader(b), int64(len(b)))
}

// get fetches path (for /healthz and /metrics).
func (s *session) get(ctx context.Context, path string) (reply, error) {
	return s.do(ctx, http.MethodGet, path, nil, 0)
}

func (s *session) do(ctx context.Context, method, path string, body io.Reader, n int64) (reply, error) {
	req, err := http.NewRequestWithContext(ctx, method, s.c.base+path, body)
	if err != nil {
		return reply{}, err
	}
	req.ContentLength = n
	// The header maps are only read while a request is in flight, and a
	// session runs one request at a time, so all its requests share them.
	req.Header = s.header
	if body == nil {
		req.Header = s.bare
	}
	resp, err := s.c.hc.Do(req)
	if err != nil {
		return reply{}, err
	}
	// The body is read to the end so the connection goes back to the pool.
	s.buf.Reset()
	_, err = s.buf.ReadFrom(resp.Body)
	resp.Body.Close()
	rep := reply{status: resp.StatusCode, body: s.buf.Bytes()}
	if err != nil {
		return rep, err
	}
	if loc := resp.Header.Get("Location"); loc != "" {
		rep.leaseID = loc[strings.LastIndexByte(loc, '/')+1:]
	}
	return rep, nil
}

// leaseIDOf returns the lease id of a grant: the last segment of Location
// (the contract's /v1/locks/{name}/leases/{lease_id}), or lease_id of the
// body when Location is missing.
func leaseIDOf(rep reply) string {
	if rep.leaseID != "" {
		return rep.leaseID
	}
	var l struct {
		LeaseID string `json:"lease_id"`
	}
	_ = json.Unmarshal(rep.body, &l)
	return l.LeaseID
}

// snippet shortens a response body for an error message.
func snippet(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}

// statusError describes an unexpected answer, with a hint for the answers
// that mean the server is configured differently from what the run needs.
func statusError(what string, rep reply) error {
	hint := ""
	switch rep.status {
	case http.StatusUnauthorized:
		hint = " (the server requires an API key: pass -key)"
	case http.StatusForbidden:
		hint = " (the API key lacks locks:write or may not use these names: check -key and -prefix)"
	case http.StatusTooManyRequests:
		hint = " (the server's rate limit, waiter limit or session quota: raise LOCKAPI_RATE_LIMIT, LOCKAPI_MAX_WAITERS and LOCKAPI_MAX_WAITERS_PER_CALLER, or LOCKAPI_MAX_SESSIONS_PER_PRINCIPAL)"
	case http.StatusServiceUnavailable:
		hint = " (the server cannot reach its store, or is shutting down)"
	}
	return fmt.Errorf("%s: HTTP %d%s: %s", what, rep.status, hint, snippet(rep.body))
}
