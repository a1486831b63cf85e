//go:build unix

package tests

import (
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/lockapi/lockapi/internal/auth"
	"github.com/lockapi/lockapi/internal/testkit/redistest"
)

// minPython is the oldest Python the SDK in sdk/python supports.
const minPython = "3.9"

// TestPythonSDK runs the Python SDK's own tests (sdk/python/tests, with
// python3 -m unittest) against the real binary, on the embedded memory store
// and on a real redis-server. The server runs with API keys: the tests get
// an admin key (force release needs one), a key limited to "ci:*" and a key
// whose expires= time has passed, to see 401 and 403 arrive as the SDK's
// typed errors.
//
// It needs python3 >= 3.9 on PATH (scripts/test installs it). Without one
// the test is skipped, unless CI is set, where it fails. Every SDK test must
// run: a skipped one fails this test, as a suite that quietly found no
// server would otherwise pass.
func TestPythonSDK(t *testing.T) {
	t.Parallel() // beside the fault suite: see TestFaults
	python := lookPython(t)
	dir, err := filepath.Abs(filepath.Join("..", "sdk", "python"))
	if err != nil {
		t.Fatal(err)
	}
	adminKey, adminLine, err := auth.NewKey("sdk", []auth.Scope{auth.ScopeAdmin}, []string{"*"})
	if err != nil {
		t.Fatal(err)
	}
	ciKey, ciLine, err := auth.NewKey("ci", []auth.Scope{auth.ScopeRead, auth.ScopeWrite}, []string{"ci:*"})
	if err != nil {
		t.Fatal(err)
	}
	// A configured key whose expires= time has passed: the server answers
	// it 401, saying when it expired.
	expiredKey, expiredLine, err := auth.NewExpiringKey("ci-old", []auth.Scope{auth.ScopeRead, auth.ScopeWrite}, []string{"ci:*"}, time.Now().Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	keys := "LOCKAPI_API_KEYS=" + adminLine + ";" + ciLine + ";" + expiredLine

	stores := []struct {
		name  string
		store func(t *testing.T) string // the LOCKAPI_REDIS_URL setting
	}{
		{"memory", func(*testing.T) string { return "LOCKAPI_REDIS_URL=" }},
		{"redis", func(t *testing.T) string { return "LOCKAPI_REDIS_URL=" + redistest.Start(t).URL }},
	}
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			s := startServer(t, []string{st.store(t), keys, "LOCKAPI_WEBHOOKS_ALLOW_PRIVATE=true"})
			out := runTool(t, dir, 2*time.Minute, []string{
				"LOCKAPI_URL=" + s.URL,
				"LOCKAPI_API_KEY=" + adminKey,
				"LOCKAPI_LIMITED_KEY=" + ciKey,
				"LOCKAPI_EXPIRED_KEY=" + expiredKey,
				"PYTHONPATH=src",
				"PYTHONDONTWRITEBYTECODE=1", // leave no __pycache__ in the source tree
			}, python, "-m", "unittest", "discover", "-s", "tests", "-v")
			if !regexp.MustCompile(`(?m)^Ran [1-9][0-9]* tests? in .*\n\nOK$`).Match(out) {
				t.Fatalf("the SDK's tests exited 0 without a plain \"OK\" (none skipped):\n%s", out)
			}
			if testing.Verbose() {
				t.Logf("unittest output:\n%s", out)
			}
		})
	}
}

// lookPython finds python3 on PATH, whichever comes first (a pyenv shim or
// the system's), and checks that it is recent enough. A missing or old one
// skips the test, or fails it when CI is set.
func lookPython(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("python3")
	if err != nil {
		missingTool(t, "python3 is not on PATH: the Python SDK test needs Python >= "+minPython+" (on Debian: apt-get install python3)")
	}
	out, err := exec.Command(path, "-c", "import sys; print('%d.%d' % sys.version_info[:2]); sys.exit(sys.version_info < (3, 9))").CombinedOutput()
	version := strings.TrimSpace(string(out))
	if err != nil {
		missingTool(t, path+" is Python "+version+": the Python SDK test needs Python >= "+minPython)
	}
	t.Logf("python %s at %s", version, path)
	return path
}
