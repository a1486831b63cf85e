package http_test

import (
	"net/http"
	"testing"

	lockhttp "github.com/lockapi/lockapi/internal/http"
)

// On an open server, a web page must not be able to make a developer's
// browser take or free their local locks: a request the browser marks as
// cross-origin is refused on every route that changes something, and so
// is a body (or a Content-Type) that is not JSON, which a form or a
// no-cors fetch can send. Reads, and clients that are not browsers, are
// served as before.
func TestCrossSite_writesRefused(t *testing.T) {
	e := MustOpenEnv(t, lockhttp.Config{}).Malformed(t)
	form := []string{"Content-Type", "application/x-www-form-urlencoded"}
	for _, tc := range []struct {
		name, method, path, body string
		header                   []string
		status                   int
		slug                     string
	}{
		{"EvilOriginForm", "POST", "/v1/locks/deploy:prod/leases", "", append([]string{"Origin", "https://evil.example"}, form...), 403, "forbidden"},
		{"EvilOriginJSON", "POST", "/v1/locks/deploy:prod/leases", `{"owner":"x"}`, []string{"Origin", "https://evil.example"}, 403, "forbidden"},
		{"NullOrigin", "POST", "/v1/sessions", "", []string{"Origin", "null", "Sec-Fetch-Site", "cross-site"}, 403, "forbidden"},
		{"SecFetchCrossSite", "POST", "/v1/sessions", "", []string{"Sec-Fetch-Site", "cross-site"}, 403, "forbidden"},
		{"SecFetchCrossSiteDelete", "DELETE", "/v1/locks/deploy:prod", "", []string{"Sec-Fetch-Site", "cross-site"}, 403, "forbidden"},
		{"EmptyForm", "POST", "/v1/locks/deploy:prod/leases", "", form, 415, "unsupported-media-type"},
		{"TextPlain", "POST", "/v1/leases", `{"locks":["deploy:prod"]}`, []string{"Content-Type", "text/plain"}, 415, "unsupported-media-type"},
		{"EmptyFormDelete", "DELETE", "/v1/locks/deploy:prod", "", form, 415, "unsupported-media-type"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			WantProblem(t, e.Do(tc.method, tc.path, tc.body, tc.header...), tc.status, tc.slug)
			if st := e.State("deploy:prod"); st.Held {
				t.Fatalf("the refused request took the lock: %+v", st)
			}
		})
	}
	// The server's own origin, or no browser headers at all, and a body of
	// JSON or none: served.
	if resp := e.Do("POST", "/v1/locks/deploy:prod/leases", `{"owner":"a"}`, "Origin", e.URL, "Sec-Fetch-Site", "same-origin"); resp.StatusCode != http.StatusCreated {
		t.Fatalf("same-origin acquire: %d %s", resp.StatusCode, resp.Body)
	}
	if resp := e.Do("POST", "/v1/sessions", ""); resp.StatusCode != http.StatusCreated {
		t.Fatalf("acquire with no body: %d %s", resp.StatusCode, resp.Body)
	}
	if resp := e.Do("GET", "/v1/locks/deploy:prod", "", "Origin", "https://evil.example", "Sec-Fetch-Site", "cross-site"); resp.StatusCode != http.StatusOK {
		t.Fatalf("a read: %d %s", resp.StatusCode, resp.Body)
	}
}
