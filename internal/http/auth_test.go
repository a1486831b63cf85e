package http_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lockapi/lockapi/internal/auth"
	lockhttp "github.com/lockapi/lockapi/internal/http"
)

// TestAuthenticate_ExpiredKey checks that a key past its expires= time is
// refused as no credential at all (401, invalid_token, the time it
// expired), that a key not yet expired works, and that the refused key
// appears in no log line.
func TestAuthenticate_ExpiredKey(t *testing.T) {
	expiredAt := time.Now().Add(-time.Hour).UTC().Truncate(time.Second)
	oldKey, oldLine, err := auth.NewExpiringKey("old-ci", []auth.Scope{auth.ScopeRead, auth.ScopeWrite}, []string{"*"}, expiredAt)
	if err != nil {
		t.Fatal(err)
	}
	newKey, newLine, err := auth.NewExpiringKey("new-ci", []auth.Scope{auth.ScopeRead, auth.ScopeWrite}, []string{"*"}, time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	keys, err := auth.ParseKeys(oldLine + "\n" + newLine)
	if err != nil {
		t.Fatal(err)
	}
	e := MustOpenEnv(t, lockhttp.Config{Keys: keys})
	as := func(key string) []string { return []string{"Authorization", "Bearer " + key} }

	t.Run("Expired401", func(t *testing.T) {
		e := e.For(t)
		resp := e.Do("POST", "/v1/locks/job/leases", `{"ttl_ms":30000}`, as(oldKey)...)
		p := WantProblem(t, resp, http.StatusUnauthorized, "unauthorized")
		if want := "the API key expired at " + expiredAt.Format(time.RFC3339); p.Detail != want {
			t.Errorf("detail %q, want %q", p.Detail, want)
		}
		if got := resp.Header.Get("WWW-Authenticate"); !strings.Contains(got, `error="invalid_token"`) || !strings.HasPrefix(got, "Bearer ") {
			t.Errorf("WWW-Authenticate %q", got)
		}
		if e.State("job").Held {
			t.Fatal("an expired key acquired the lock")
		}
	})

	t.Run("NotYetExpired200", func(t *testing.T) {
		e := e.For(t)
		if resp := e.Do("GET", "/v1/locks/job", "", as(newKey)...); resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d %s", resp.StatusCode, resp.Body)
		}
	})

	if strings.Contains(e.Logs.String(), oldKey) || strings.Contains(e.Logs.String(), newKey) {
		t.Fatal("a key was logged")
	}
}
