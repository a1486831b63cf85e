package http_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lockapi/lockapi/internal/auth"
	lockhttp "github.com/lockapi/lockapi/internal/http"
	"github.com/lockapi/lockapi/internal/lock"
)

// A listing by an admin limited by patterns answers the same for a prefix
// whose names it may not see as for a prefix with no names: no locks, no
// next_cursor. Before, the names it may not see took places on the page,
// and left a cursor behind them.
func TestList_hiddenNamesLeaveNoTrace(t *testing.T) {
	adminA, line, err := auth.NewKey("admin-a", []auth.Scope{auth.ScopeAdmin}, []string{"team-a:*"})
	if err != nil {
		t.Fatal(err)
	}
	keys, err := auth.ParseKeys(line)
	if err != nil {
		t.Fatal(err)
	}
	e := MustOpenEnv(t, lockhttp.Config{Keys: keys})
	as := []string{"Authorization", "Bearer " + adminA}
	for _, name := range []string{"team-b:secret-1a", "team-b:secret-1b", "team-b:secret-1c"} {
		if _, err := e.Mem.TryAcquire(context.Background(), lock.AcquireRequest{Lock: name, Owner: "b", Principal: "team-b", TTL: time.Minute}); err != nil {
			t.Fatal(err)
		}
	}
	for _, path := range []string{"/v1/locks?prefix=team-b:secret-1&limit=1", "/v1/locks?prefix=team-b:secret-2&limit=1", "/v1/locks?limit=2"} {
		resp := e.Do("GET", path, "", as...)
		if resp.StatusCode != http.StatusOK || strings.TrimSpace(string(resp.Body)) != `{"locks":[],"next_cursor":null}` {
			t.Fatalf("GET %s: %d %s", path, resp.StatusCode, resp.Body)
		}
	}
}
