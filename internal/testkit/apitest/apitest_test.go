package apitest_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/lockapi/lockapi/internal/auth"
	lockhttp "github.com/lockapi/lockapi/internal/http"
	"github.com/lockapi/lockapi/internal/store/memory"
	"github.com/lockapi/lockapi/internal/testkit/apitest"
)

// recorder is a testing.TB that keeps Errorf calls instead of failing.
type recorder struct {
	testing.TB
	mu   sync.Mutex
	errs []string
}

func (r *recorder) Helper() {}

func (r *recorder) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

func (r *recorder) Errors() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.errs...)
}

// fake serves one canned answer for every request.
func fake(t *testing.T, status int, header map[string]string, body string) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for k, v := range header {
			w.Header().Set(k, v)
		}
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	return srv
}

const goodLease = `{"lock":"a","lease_id":"01JD3Z8Q6W9M4T5R2K7X1B0C8N","owner":"o","fencing_token":1,"hold_count":1,"ttl_ms":30000,` +
	`"acquired_at":"2025-11-22T14:02:00.000Z","expires_at":"2025-11-22T14:02:30.000Z","metadata":{}}`

var (
	jsonHeader    = map[string]string{"Content-Type": "application/json", "X-Request-ID": "r"}
	leaseHeader   = map[string]string{"Content-Type": "application/json", "X-Request-ID": "r", "Location": "/v1/locks/a/leases/01JD3Z8Q6W9M4T5R2K7X1B0C8N"}
	problemHeader = map[string]string{"Content-Type": "application/problem+json", "X-Request-ID": "r"}
)

func TestClient_ReportsMismatches(t *testing.T) {
	for _, tc := range []struct {
		name         string
		method, path string
		status       int
		header       map[string]string
		body         string
		want         string // a substring of the report
	}{
		{"MissingRequiredField", "POST", "/v1/locks/a/leases", 201, leaseHeader,
			strings.Replace(goodLease, `"owner":"o",`, "", 1), "owner"},
		{"WrongType", "POST", "/v1/locks/a/leases", 201, leaseHeader,
			strings.Replace(goodLease, `"fencing_token":1`, `"fencing_token":"1"`, 1), "fencing_token"},
		{"NullMetadata", "POST", "/v1/locks/a/leases", 201, leaseHeader,
			strings.Replace(goodLease, `"metadata":{}`, `"metadata":null`, 1), "metadata"},
		{"UndocumentedStatus", "POST", "/v1/locks/a/leases", 202, leaseHeader, goodLease, "status"},
		{"WrongContentType", "POST", "/v1/locks/a/leases", 201, map[string]string{"Content-Type": "text/plain", "X-Request-ID": "r", "Location": "/v1/locks/a/leases/x"}, goodLease, "text/plain"},
		{"NoRequestID", "POST", "/v1/locks/a/leases", 201, map[string]string{"Content-Type": "application/json", "Location": "/v1/locks/a/leases/x"}, goodLease, "X-Request-ID"},
		{"NoLocation", "POST", "/v1/locks/a/leases", 201, jsonHeader, goodLease, "Location"},
		{"UnmodelledHeader", "GET", "/v1/locks/a", 400, map[string]string{"Content-Type": "application/problem+json", "X-Request-ID": "r", "Retry-After": "1"},
			`{"type":"https://lockapi.dev/problems/invalid-request","title":"Invalid request","status":400,"detail":"x"}`, "Retry-After is not modelled"},
		{"NoLockIndex", "GET", "/v1/locks/a", 200, jsonHeader, `{}`, "X-Lock-Index"},
		{"NoRetryAfter", "GET", "/v1/locks/a", 429, problemHeader,
			`{"type":"https://lockapi.dev/problems/rate-limited","title":"Too many requests","status":429,"detail":"x"}`, "Retry-After"},
		{"ErrorNotProblemJSON", "GET", "/v1/locks/a", 400, jsonHeader, `{"error":"bad"}`, "problem+json"},
		{"ProblemMissingTitle", "GET", "/v1/locks/a", 400, problemHeader,
			`{"type":"https://lockapi.dev/problems/invalid-request","status":400,"detail":"x"}`, "title"},
		{"ProblemStatusMismatch", "GET", "/v1/locks/a", 400, problemHeader,
			`{"type":"https://lockapi.dev/problems/invalid-request","title":"Invalid request","status":409,"detail":"x"}`, "problem status"},
		{"ProblemTypeMismatch", "GET", "/v1/locks/a", 400, problemHeader,
			`{"type":"https://lockapi.dev/problems/lock-held","title":"Lock held","status":400,"detail":"x"}`, "goes with status 409"},
		{"UnknownRouteAnswered200", "GET", "/v2/nothing", 200, jsonHeader, `{}`, "4xx"},
		{"WrongMethodNot405", "PUT", "/v1/locks/a", 404, problemHeader,
			`{"type":"https://lockapi.dev/problems/not-found","title":"Not found","status":404,"detail":"x"}`, "405"},
		{"405WithoutAllow", "PUT", "/v1/locks/a", 405, problemHeader,
			`{"type":"https://lockapi.dev/problems/method-not-allowed","title":"Method not allowed","status":405,"detail":"x"}`, "Allow"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := fake(t, tc.status, tc.header, tc.body)
			rec := &recorder{TB: t}
			c := apitest.NewClient(rec, srv.URL)
			req, _ := http.NewRequest(tc.method, srv.URL+tc.path, nil)
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			errs := rec.Errors()
			if len(errs) == 0 {
				t.Fatal("mismatch not reported")
			}
			if !strings.Contains(strings.Join(errs, "\n"), tc.want) {
				t.Fatalf("report does not mention %q:\n%s", tc.want, strings.Join(errs, "\n"))
			}
		})
	}
}

func TestClient_AcceptsConformingServer(t *testing.T) {
	mem := memory.New()
	defer mem.Close()
	release, _ := auth.NewReleaseSigner(auth.RandomSecret())
	srv := lockhttp.NewServer(mem, lockhttp.Config{Release: release})
	if err := srv.Open("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = srv.Close(context.Background()) }()

	rec := &recorder{TB: t}
	c := apitest.NewClient(rec, srv.URL(), apitest.ValidateRequests())
	for _, req := range []struct{ method, path, body string }{
		{"POST", "/v1/locks/a/leases", `{"owner":"o","ttl_ms":1000,"metadata":{"k":"v"}}`},
		{"POST", "/v1/locks/a/leases", `{"owner":"p"}`},
		{"GET", "/v1/locks/a", ""},
		{"GET", "/v1/locks?limit=10&prefix=a", ""},
		{"DELETE", "/v1/locks/a", ""},
		{"GET", "/healthz", ""},
		{"GET", "/readyz", ""},
		{"GET", "/openapi.yaml", ""},
		{"GET", "/openapi.json", ""},
		{"HEAD", "/v1/locks/a", ""},
		{"GET", "/nowhere", ""},
	} {
		r, _ := http.NewRequest(req.method, srv.URL()+req.path, strings.NewReader(req.body))
		if req.body != "" {
			r.Header.Set("Content-Type", "application/json")
		}
		resp, err := c.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	if errs := rec.Errors(); len(errs) > 0 {
		t.Fatalf("conforming exchanges reported:\n%s", strings.Join(errs, "\n"))
	}
}

// TestClient_AcceptsUnknownProblemType: the set of problem types is open.
func TestClient_AcceptsUnknownProblemType(t *testing.T) {
	srv := fake(t, 400, problemHeader, `{"type":"https://lockapi.dev/problems/added-later","title":"Added later","status":400,"detail":"x"}`)
	rec := &recorder{TB: t}
	resp, err := apitest.NewClient(rec, srv.URL).Get(srv.URL + "/v1/locks/a")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if errs := rec.Errors(); len(errs) > 0 {
		t.Fatalf("an unknown problem type reported:\n%s", strings.Join(errs, "\n"))
	}
}

func TestClient_ValidateRequestsReportsBadRequest(t *testing.T) {
	srv := fake(t, 400, problemHeader,
		`{"type":"https://lockapi.dev/problems/invalid-request","title":"Invalid request","status":400,"detail":"x"}`)
	rec := &recorder{TB: t}
	c := apitest.NewClient(rec, srv.URL, apitest.ValidateRequests())
	resp, err := c.Post(srv.URL+"/v1/locks/a/leases", "application/json", strings.NewReader(`{"ttl_ms":"soon"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if errs := rec.Errors(); len(errs) == 0 || !strings.Contains(strings.Join(errs, "\n"), "request does not match") {
		t.Fatalf("bad request not reported: %v", errs)
	}
}
