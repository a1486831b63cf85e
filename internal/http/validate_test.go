package http_test

import (
	"net/http"
	"slices"
	"testing"
	"time"

	lockhttp "github.com/lockapi/lockapi/internal/http"
)

// An invalid acquire or renew names each broken rule once, in the words of
// whoever owns the rule: the domain (internal/lock) for the shortest TTL,
// the mode and the limit, the server for its longest TTL, and the API for
// members it takes only when absent.
func TestAcquire_each_rule_reported_once(t *testing.T) {
	e := MustOpenEnv(t, lockhttp.Config{MaxTTL: time.Hour})
	l := e.Acquire("held", `{"owner":"a"}`)
	for _, tc := range []struct {
		name, path, body string
		want             []lockhttp.FieldError
	}{
		{"TTLBelowMin", "/v1/locks/v/leases", `{"ttl_ms":9}`,
			[]lockhttp.FieldError{{Field: "ttl_ms", Detail: "must be at least 10"}}},
		{"TTLNegative", "/v1/locks/v/leases", `{"ttl_ms":-9223372036854775808}`,
			[]lockhttp.FieldError{{Field: "ttl_ms", Detail: "must be at least 10"}}},
		{"TTLAboveMax", "/v1/locks/v/leases", `{"ttl_ms":3600001}`,
			[]lockhttp.FieldError{{Field: "ttl_ms", Detail: "must be at most 3600000, the server's maximum TTL"}}},
		{"TTLBeyondDuration", "/v1/locks/v/leases", `{"ttl_ms":9223372036854775807}`,
			[]lockhttp.FieldError{{Field: "ttl_ms", Detail: "must be at most 3600000, the server's maximum TTL"}}},
		{"LimitZero", "/v1/locks/v/leases", `{"limit":0}`,
			[]lockhttp.FieldError{{Field: "limit", Detail: "must be at least 1; leave limit out for a lock"}}},
		{"LimitAboveMax", "/v1/locks/v/leases", `{"limit":10001}`,
			[]lockhttp.FieldError{{Field: "limit", Detail: "a semaphore has 1-10000 permits"}}},
		{"LimitNegative", "/v1/locks/v/leases", `{"limit":-9223372036854775808}`,
			[]lockhttp.FieldError{{Field: "limit", Detail: "a semaphore has 1-10000 permits"}}},
		{"ModeEmpty", "/v1/locks/v/leases", `{"mode":""}`,
			[]lockhttp.FieldError{{Field: "mode", Detail: `must be "exclusive" or "shared"; leave mode out for the default`}}},
		{"ModeUnknown", "/v1/locks/v/leases", `{"mode":"upgrade"}`,
			[]lockhttp.FieldError{{Field: "mode", Detail: `must be "exclusive" or "shared"`}}},
		{"DomainAndServer", "/v1/locks/v/leases", `{"owner":"","ttl_ms":3600001}`, []lockhttp.FieldError{
			{Field: "owner", Detail: "an owner is 1-128 printable characters"},
			{Field: "ttl_ms", Detail: "must be at most 3600000, the server's maximum TTL"},
		}},
		{"MultiTTLBelowMin", "/v1/leases", `{"locks":["v"],"ttl_ms":9}`,
			[]lockhttp.FieldError{{Field: "ttl_ms", Detail: "must be at least 10"}}},
		{"RenewTTLBelowMin", "/v1/locks/held/leases/" + l.LeaseID + "/renew", `{"ttl_ms":0}`,
			[]lockhttp.FieldError{{Field: "ttl_ms", Detail: "must be at least 10"}}},
		{"RenewTTLAboveMax", "/v1/locks/held/leases/" + l.LeaseID + "/renew", `{"ttl_ms":3600001}`,
			[]lockhttp.FieldError{{Field: "ttl_ms", Detail: "must be at most 3600000, the server's maximum TTL"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := WantProblem(t, e.Malformed(t).Do("POST", tc.path, tc.body), http.StatusBadRequest, "invalid-request")
			if !slices.Equal(p.Errors, tc.want) {
				t.Fatalf("errors = %+v\nwant     %+v", p.Errors, tc.want)
			}
		})
	}
	if st := e.State("v"); st.Held {
		t.Fatalf("a refused acquire took the lock: %+v", st)
	}
}
