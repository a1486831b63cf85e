package http_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"

	lockhttp "github.com/lockapi/lockapi/internal/http"
	"github.com/lockapi/lockapi/internal/metrics"
)

// TestHead_EveryGETRoute: RFC 9110 wants HEAD wherever GET is served. Each
// GET route of the router answers HEAD with GET's status and Content-Type,
// and no body.
func TestHead_EveryGETRoute(t *testing.T) {
	e := mustOpenWebhookEnv(t, lockhttp.Config{Metrics: metrics.New()}, nil)
	e.Acquire("h", `{"owner":"a"}`)
	params := strings.NewReplacer("/v1/sessions/{id}", "/v1/sessions/01JD3Z8Q6W9M4T5R2K7X1B0C9S",
		"{name}", "h", "{id}", "wh1", "{event_id}", "1-0", "{lease_id}", "01JD3Z8Q6W9M4T5R2K7X1B0C8N")

	var paths []string
	err := chi.Walk(e.Server.Handler().(chi.Routes), func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		if method == http.MethodGet && !strings.HasPrefix(route, "/ui") {
			paths = append(paths, params.Replace(route))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) < 10 {
		t.Fatalf("only %d GET routes: %v", len(paths), paths)
	}
	for _, path := range paths {
		t.Run(strings.TrimPrefix(path, "/"), func(t *testing.T) {
			get := do(t, http.DefaultClient, e.URL, http.MethodGet, path)
			head := do(t, e.For(t).Client, e.URL, http.MethodHead, path) // checked against the spec
			if head.status != get.status || head.contentType != get.contentType {
				t.Errorf("HEAD: %d %q; GET: %d %q", head.status, head.contentType, get.status, get.contentType)
			}
			if head.body != "" {
				t.Errorf("HEAD answered a body: %q", head.body)
			}
			if head.requestID == "" {
				t.Error("HEAD answered no X-Request-ID")
			}
		})
	}
}

// TestHead_NoGETRoute405: HEAD where there is no GET is a wrong method.
func TestHead_NoGETRoute405(t *testing.T) {
	e := MustOpenEnv(t, lockhttp.Config{})
	r := do(t, e.Malformed(t).Client, e.URL, http.MethodHead, "/v1/locks/x/leases")
	if r.status != http.StatusMethodNotAllowed || r.contentType != "application/problem+json" || r.allow != "POST" {
		t.Fatalf("HEAD on a POST route: %+v", r)
	}
}

type headResult struct {
	status                       int
	contentType, requestID, body string
	allow, location              string
}

// do sends one request with no body; an event stream is read no further
// than its headers.
func do(t *testing.T, client *http.Client, base, method, path string) headResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), promptly)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	r := headResult{status: resp.StatusCode, contentType: resp.Header.Get("Content-Type"), requestID: resp.Header.Get("X-Request-ID"), allow: resp.Header.Get("Allow"), location: resp.Header.Get("Location")}
	if r.contentType != "text/event-stream" || method == http.MethodHead {
		b, _ := io.ReadAll(resp.Body)
		r.body = string(b)
	}
	return r
}
