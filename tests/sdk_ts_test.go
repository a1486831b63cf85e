//go:build unix

package tests

import (
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/lockapi/lockapi/internal/auth"
	"github.com/lockapi/lockapi/internal/testkit/redistest"
)

// TestTypeScriptSDK runs the TypeScript SDK's own tests (sdk/ts, node:test)
// against the real binary, on the embedded memory store and on a real
// redis-server: it installs the package's dev dependencies (npm ci), builds
// its ESM and CommonJS output (npm run build), typechecks docs/SDK_TS.md's
// samples and sdk/ts/test/types against the declarations (npm run check),
// and runs npm test once per
// store with the server's URL and API keys in the environment (see
// sdk/ts/test/helpers.mjs, which also learns the store's name from
// LOCKAPI_STORE). The servers have API keys configured, so every
// scenario also shows that the SDK sends its key, renewals included.
//
// It needs node and npm (and the npm registry, or its cache, for npm ci).
// Without them the test is skipped, unless CI is set, where it fails.
func TestTypeScriptSDK(t *testing.T) {
	t.Parallel() // beside the fault suite: see TestFaults
	node := lookTool(t, "node")
	npm := lookTool(t, "npm")
	checkNodeVersion(t, node)

	dir, err := filepath.Abs(filepath.Join("..", "sdk", "ts"))
	if err != nil {
		t.Fatal(err)
	}
	runTool(t, dir, 10*time.Minute, nil, npm, "ci", "--no-audit", "--no-fund")
	runTool(t, dir, 3*time.Minute, nil, npm, "run", "build") // cleans dist/ first
	// The declarations as users compile against them: docs/SDK_TS.md's
	// samples and test/types/, strict with exactOptionalPropertyTypes.
	runTool(t, dir, 2*time.Minute, nil, npm, "run", "check")

	keys := newTSSDKKeys(t)
	stores := []struct {
		name string
		env  func(t *testing.T) []string
	}{
		{"memory", func(*testing.T) []string { return []string{"LOCKAPI_REDIS_URL="} }},
		{"redis", func(t *testing.T) []string { return []string{"LOCKAPI_REDIS_URL=" + redistest.Start(t).URL} }},
	}
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			s := startServer(t, append(st.env(t), "LOCKAPI_API_KEYS="+keys.lines, "LOCKAPI_WEBHOOKS_ALLOW_PRIVATE=true"))
			out := runTool(t, dir, 3*time.Minute, append(keys.env(s.URL), "LOCKAPI_STORE="+st.name), npm, "test")
			// node --test exits non-zero on a failure; an exit 0 must also
			// have run tests, not found none.
			if !regexp.MustCompile(`(?m)^# pass [1-9][0-9]*$`).Match(out) || !regexp.MustCompile(`(?m)^# fail 0$`).Match(out) {
				t.Fatalf("npm test exited 0 without \"# pass N\" and \"# fail 0\":\n%s", out)
			}
			t.Logf("npm test on %s:\n%s", st.name, tapSummary(out))
		})
	}
}

// tsSDKKeys are the API keys the SDK's tests use.
type tsSDKKeys struct {
	lines                     string // LOCKAPI_API_KEYS
	key, admin, narrow, stale string
}

func newTSSDKKeys(t *testing.T) tsSDKKeys {
	t.Helper()
	newKey := func(principal string, expires time.Time, scopes []auth.Scope, patterns ...string) (key, line string) {
		key, line, err := auth.NewExpiringKey(principal, scopes, patterns, expires)
		if err != nil {
			t.Fatal(err)
		}
		return key, line
	}
	rw := []auth.Scope{auth.ScopeRead, auth.ScopeWrite}
	never := time.Time{}
	var k tsSDKKeys
	var lines [4]string
	k.key, lines[0] = newKey("sdk-ts", never, rw, "*")
	k.admin, lines[1] = newKey("sdk-ts-admin", never, []auth.Scope{auth.ScopeAdmin}, "*")
	k.narrow, lines[2] = newKey("sdk-ts-narrow", never, rw, "other:*")
	// A configured key whose expires= time has passed: the server answers
	// it 401, saying when it expired.
	k.stale, lines[3] = newKey("sdk-ts-expired", time.Now().Add(-time.Hour), rw, "*")
	k.lines = strings.Join(lines[:], ";")
	return k
}

// env is the environment sdk/ts/test/helpers.mjs reads.
func (k tsSDKKeys) env(url string) []string {
	return []string{
		"LOCKAPI_URL=" + url,
		"LOCKAPI_KEY=" + k.key,
		"LOCKAPI_ADMIN_KEY=" + k.admin,
		"LOCKAPI_NARROW_KEY=" + k.narrow,
		"LOCKAPI_EXPIRED_KEY=" + k.stale,
	}
}

// tapSummary keeps the lines of node --test's TAP output that name a
// test's result, and the totals.
func tapSummary(out []byte) string {
	var b strings.Builder
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(line, "ok ") || strings.HasPrefix(line, "not ok ") || strings.HasPrefix(line, "# ") {
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}
