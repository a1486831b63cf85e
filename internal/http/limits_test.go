package http_test

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/lockapi/lockapi"
	lockhttp "github.com/lockapi/lockapi/internal/http"
)

// TestMaxTTLCeiling: no server accepts a ttl_ms above MaxTTLCeiling, however
// it is configured, and openapi.yaml gives that ceiling as the maximum of
// every ttl_ms, so the spec says all the server enforces.
func TestMaxTTLCeiling(t *testing.T) {
	ceiling := lockhttp.MaxTTLCeiling.Milliseconds()

	t.Run("SpecMaximum", func(t *testing.T) {
		doc, err := openapi3.NewLoader().LoadFromData(lockapi.OpenAPI)
		if err != nil {
			t.Fatal(err)
		}
		for _, schema := range []string{"AcquireRequest", "MultiAcquireRequest", "RenewRequest", "Lease"} {
			ttl := doc.Components.Schemas[schema].Value.Properties["ttl_ms"].Value
			if ttl.Max == nil || int64(*ttl.Max) != ceiling {
				t.Errorf("%s.ttl_ms maximum = %v, want %d", schema, ttl.Max, ceiling)
			}
		}
	})

	e := MustOpenEnv(t, lockhttp.Config{MaxTTL: 2 * lockhttp.MaxTTLCeiling})
	busy := e.Acquire("busy", `{"owner":"a"}`)
	for _, tc := range []struct {
		name, path string
		ttl        int64
		status     int
	}{
		{"AcquireAtCeiling201", "/v1/locks/at/leases", ceiling, http.StatusCreated},
		{"AcquireAboveCeiling400", "/v1/locks/above/leases", ceiling + 1, http.StatusBadRequest},
		{"RenewAtCeiling200", "/v1/locks/busy/leases/" + busy.LeaseID + "/renew", ceiling, http.StatusOK},
		{"RenewAboveCeiling400", "/v1/locks/busy/leases/" + busy.LeaseID + "/renew", ceiling + 1, http.StatusBadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := e.For(t)
			if tc.status == http.StatusBadRequest {
				e = e.Malformed(t)
			}
			resp := e.Do("POST", tc.path, fmt.Sprintf(`{"ttl_ms":%d}`, tc.ttl))
			if resp.StatusCode != tc.status {
				t.Fatalf("status = %d, want %d; %s", resp.StatusCode, tc.status, resp.Body)
			}
			if tc.status == http.StatusBadRequest {
				if p := WantProblem(t, resp, tc.status, "invalid-request"); len(p.Errors) != 1 || p.Errors[0].Field != "ttl_ms" {
					t.Fatalf("errors = %+v", p.Errors)
				}
			} else if l := Decode[lockhttp.Lease](t, resp); l.TTLMs != ceiling {
				t.Fatalf("ttl_ms = %d, want %d", l.TTLMs, ceiling)
			}
		})
	}
}
