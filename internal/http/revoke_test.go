package http_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/lockapi/lockapi/internal/auth"
	lockhttp "github.com/lockapi/lockapi/internal/http"
	"github.com/lockapi/lockapi/internal/lock"
)

// A waiting acquire whose key is removed while it waits is granted no
// lease: its grant is given back and it is answered 401, parked off
// net/http or waiting in it, single or multi-lock.
func TestWaitedAcquire_KeyRevoked(t *testing.T) {
	cases := []struct {
		name, path, body string
		header           []string
		parked           bool
	}{
		{"ParkedSingle", "/v1/locks/q/leases", `{"owner":"b","wait_ms":60000}`, nil, true},
		{"NetHTTPSingle", "/v1/locks/q/leases", `{"owner":"b","wait_ms":60000}`, []string{"Connection", "close"}, false},
		{"ParkedMulti", "/v1/leases", `{"locks":["q","r"],"owner":"b","wait_ms":60000}`, nil, true},
		{"NetHTTPMulti", "/v1/leases", `{"locks":["q","r"],"owner":"b","wait_ms":60000}`, []string{"Connection", "close"}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			key, line, err := auth.NewKey("revoked", []auth.Scope{auth.ScopeWrite}, []string{"*"})
			if err != nil {
				t.Fatal(err)
			}
			_, other, err := auth.NewKey("other", []auth.Scope{auth.ScopeRead}, []string{"*"})
			if err != nil {
				t.Fatal(err)
			}
			keys, err := auth.ParseKeys(line + "\n" + other)
			if err != nil {
				t.Fatal(err)
			}
			e := MustOpenHookedEnv(t, lockhttp.Config{Keys: keys})
			ctx := context.Background()
			holder, err := e.Mem.TryAcquire(ctx, lock.AcquireRequest{Lock: "q", Owner: "a", TTL: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			c := dialRaw(t, e)
			c.send(request("POST", tc.path, tc.body, append([]string{"Authorization", "Bearer " + key}, tc.header...)...))
			Within(t, e.Hooks.Watching, "waiter registered")
			if tc.parked {
				waitParked(t, e, 1)
			}

			next, err := auth.ParseKeys(other)
			if err != nil {
				t.Fatal(err)
			}
			keys.Replace(next)
			if _, err := e.Mem.Release(ctx, lock.LeaseRef{Lock: "q", ID: holder.Lease.ID}, false); err != nil {
				t.Fatal(err)
			}
			resp := c.read()
			WantProblem(t, resp, http.StatusUnauthorized, "unauthorized")
			for _, name := range []string{"q", "r"} {
				if st := e.State(name); st.Held {
					t.Errorf("%s is held after the revoked key's wait: %+v", name, st.Holders)
				}
			}
		})
	}
}
