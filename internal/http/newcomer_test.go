package http_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/lockapi/lockapi"
	lockhttp "github.com/lockapi/lockapi/internal/http"
	"github.com/lockapi/lockapi/internal/lock"
	"github.com/lockapi/lockapi/internal/store/memory"
	"github.com/lockapi/lockapi/internal/testkit/apitest"
)

// Defects a newcomer met in the first hour: answers that were right in
// status but wrong in what they told the reader.

// JSON answers are not HTML-escaped: a release_url keeps its '&', a detail
// its '<'.
func TestJSON_NotHTMLEscaped(t *testing.T) {
	e := MustOpenEnv(t, lockhttp.Config{})
	resp := e.Do("POST", "/v1/locks/esc/leases", `{"owner":"alice","ttl_ms":30000}`)
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("acquire: %d %s", resp.StatusCode, resp.Body)
	}
	if bytes.Contains(resp.Body, []byte(`\u0026`)) || !bytes.Contains(resp.Body, []byte("&sig=")) {
		t.Errorf("lease body escapes '&': %s", resp.Body)
	}
	l := Decode[lockhttp.Lease](t, resp)
	if !strings.Contains(l.ReleaseURL, "&") {
		t.Errorf("release_url %q has no '&'", l.ReleaseURL)
	}

	// An owner with '<' and '>' comes back in a 409's holder as written.
	e.Acquire("esc2", `{"owner":"<alice>","ttl_ms":30000}`)
	resp = e.Do("POST", "/v1/locks/esc2/leases", `{"owner":"bob"}`)
	WantProblem(t, resp, http.StatusConflict, "lock-held")
	if bytes.Contains(resp.Body, []byte(`\u003c`)) || !bytes.Contains(resp.Body, []byte("<alice>")) {
		t.Errorf("problem body escapes '<': %s", resp.Body)
	}
}

// A signed release whose exp is not a number says what exp must be, rather
// than that it is missing.
func TestSignedRelease_ExpNotANumber(t *testing.T) {
	e := MustOpenEnv(t, lockhttp.Config{}).Malformed(t)
	l := e.Acquire("signed", `{"owner":"alice"}`)
	for _, tc := range []struct{ name, query, want string }{
		{"Text", "exp=abc&sig=x", "must be an integer of Unix seconds"},
		{"Missing", "sig=x", "is required"},
		{"Empty", "exp=&sig=x", "is required"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := e.For(t).Do("POST", "/v1/locks/signed/leases/"+l.LeaseID+"/release?"+tc.query, "")
			p := WantProblem(t, resp, http.StatusBadRequest, "invalid-request")
			if len(p.Errors) != 1 || p.Errors[0].Field != "exp" || !strings.Contains(p.Errors[0].Detail, tc.want) {
				t.Errorf("errors = %+v, want exp: ...%s...", p.Errors, tc.want)
			}
		})
	}
	if st := e.State("signed"); st.Holder == nil {
		t.Error("a malformed signed release freed the lock")
	}
}

// A lock name with '/' gets the lock-name rule, not a bare "no route".
func TestLockName_WithSlash(t *testing.T) {
	e := MustOpenEnv(t, lockhttp.Config{}).Malformed(t)
	for _, tc := range []struct{ method, path string }{
		{"POST", "/v1/locks/team/deploy/leases"},
		{"GET", "/v1/locks/team/deploy"},
		{"DELETE", "/v1/locks/team/deploy"},
		{"POST", "/v1/locks/a/b/c/leases/01J0000000000000000000000/renew"},
	} {
		t.Run(tc.method+tc.path, func(t *testing.T) {
			body := ""
			if tc.method == "POST" {
				body = `{"owner":"alice"}`
			}
			resp := e.For(t).Do(tc.method, tc.path, body)
			p := WantProblem(t, resp, http.StatusBadRequest, "invalid-request")
			if len(p.Errors) != 1 || p.Errors[0].Field != "name" || !strings.Contains(p.Errors[0].Detail, "'/'") {
				t.Errorf("errors = %+v, want the lock-name rule naming '/'", p.Errors)
			}
		})
	}
	// Other unknown paths are still 404s.
	WantProblem(t, e.Do("GET", "/v1/nothing/here", ""), http.StatusNotFound, "not-found")
	if page, err := e.Mem.List(t.Context(), lock.ListRequest{Limit: 1000}); err != nil || len(page.Locks) != 0 {
		t.Errorf("locks after refused requests: %+v, %v", page.Locks, err)
	}
}

// The spec's own examples work on a server with default settings: a
// newcomer pastes them first.
func TestSpec_ExamplesAcceptedByDefaultServer(t *testing.T) {
	doc, err := openapi3.NewLoader().LoadFromData(lockapi.OpenAPI)
	if err != nil {
		t.Fatal(err)
	}
	body := map[string]any{"owner": "alice"}
	for name, p := range doc.Components.Schemas["AcquireRequest"].Value.Properties {
		if p.Value.Example != nil && name != "session" {
			body[name] = p.Value.Example
		}
	}
	raw, _ := json.Marshal(body)
	e := MustOpenEnv(t, lockhttp.Config{})
	if resp := e.Do("POST", "/v1/locks/example/leases", string(raw)); resp.StatusCode != http.StatusCreated {
		t.Errorf("acquire with the spec's examples %s: %d %s", raw, resp.StatusCode, resp.Body)
	}

	url := doc.Components.Schemas["CreateWebhookRequest"].Value.Properties["url"].Value
	if url.Format != "uri" || url.MinLength != 1 {
		t.Errorf("webhook url: format %q, minLength %d; want uri, 1", url.Format, url.MinLength)
	}
}

// GET /openapi.yaml is text in a media type a generated client reads:
// text/plain when that is all it accepts.
func TestOpenAPI_YAMLAsText(t *testing.T) {
	e := MustOpenEnv(t, lockhttp.Config{})
	for accept, want := range map[string]string{
		"":                 "application/yaml",
		"application/yaml": "application/yaml",
		"text/plain":       "text/plain; charset=utf-8",
	} {
		var hdr []string
		if accept != "" {
			hdr = []string{"Accept", accept}
		}
		resp := e.Do("GET", "/openapi.yaml", "", hdr...)
		if got := resp.Header.Get("Content-Type"); resp.StatusCode != http.StatusOK || got != want || !bytes.HasPrefix(resp.Body, []byte("openapi: ")) {
			t.Errorf("Accept %q: %d %q, want 200 %q with the YAML", accept, resp.StatusCode, got, want)
		}
	}
}

// The root sends a browser to the dashboard once one is mounted: GET and
// HEAD answer 302 Found to /ui/ (as the spec says), any other method on it
// is a 405, and other unknown paths stay problem+json 404s.
func TestRoot_RedirectsToTheDashboard(t *testing.T) {
	mem := memory.New()
	t.Cleanup(func() { _ = mem.Close() })
	srv := lockhttp.NewServer(mem, withRelease(lockhttp.Config{}))
	withDashboard(srv)
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	noFollow := func(c *http.Client) *http.Client {
		c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
		return c
	}
	spec := apitest.NewClient(t, ts.URL) // checked against the spec; follows no redirect
	for _, method := range []string{http.MethodGet, http.MethodHead} {
		r := do(t, spec, ts.URL, method, "/")
		if r.status != http.StatusFound || r.location != lockhttp.DashboardPath || r.requestID == "" {
			t.Errorf("%s /: %+v, want 302 to %s", method, r, lockhttp.DashboardPath)
		}
	}
	if r := do(t, http.DefaultClient, ts.URL, http.MethodGet, "/"); r.status != http.StatusOK || !strings.Contains(r.body, "the dashboard") {
		t.Errorf("GET / followed: %+v", r)
	}
	plain := noFollow(&http.Client{})
	if r := do(t, plain, ts.URL, http.MethodPost, "/"); r.status != http.StatusMethodNotAllowed || r.contentType != "application/problem+json" {
		t.Errorf("POST /: %+v", r)
	}
	if r := do(t, plain, ts.URL, http.MethodGet, "/nothing/here"); r.status != http.StatusNotFound || r.contentType != "application/problem+json" {
		t.Errorf("GET /nothing/here: %+v", r)
	}
}

// withDashboard mounts a stand-in dashboard on srv.
func withDashboard(srv *lockhttp.Server) {
	srv.MountDashboard(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = io.WriteString(w, "<html>the dashboard</html>")
	}))
}
