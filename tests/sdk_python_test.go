//go:build unix

package tests

import (
	"archive/zip"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockapi/lockapi/internal/auth"
	"github.com/lockapi/lockapi/internal/testkit/redistest"
)

// minPython is the oldest Python the SDK in sdk/python claims
// (pyproject.toml's requires-python): the oldest its tests run on. Under
// CI, TestPythonSDK fails unless it found that version to run on.
const minPython = "3.9"

// TestPythonSDK runs the Python SDK's own tests (sdk/python/tests, with
// python3 -m unittest) against the real binary, on the embedded memory store
// and on a real redis-server. The server runs with API keys: the tests get
// an admin key (force release needs one), a key limited to "ci:*" and a key
// whose expires= time has passed, to see 401 and 403 arrive as the SDK's
// typed errors.
//
// It runs the suite with python3 on both stores, and with the oldest and
// newest other Python >= minPython this machine has (pyenv's versions,
// Debian's python3.N: see otherPythons) on the memory store, so that the
// floor pyproject.toml claims is a version tested.
//
// It needs python3 >= minPython on PATH (scripts/test installs it). Without one
// the test is skipped, unless CI is set, where it fails. Every SDK test must
// run: a skipped one fails this test, as a suite that quietly found no
// server would otherwise pass.
func TestPythonSDK(t *testing.T) {
	t.Parallel() // beside the fault suite: see TestFaults
	python := lookPython(t)
	pythons := otherPythons(t, python)
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

	memory := func(*testing.T) string { return "LOCKAPI_REDIS_URL=" }
	stores := []struct {
		name   string
		store  func(t *testing.T) string // the LOCKAPI_REDIS_URL setting
		python string
	}{
		{"memory", memory, python},
		{"redis", func(t *testing.T) string { return "LOCKAPI_REDIS_URL=" + redistest.Start(t).URL }, python},
	}
	for _, p := range pythons {
		stores = append(stores, struct {
			name   string
			store  func(t *testing.T) string
			python string
		}{"memory-python" + p.version, memory, p.path})
	}
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			// The suite mostly waits (on TTLs, renewals, a proxy that
			// cuts): its runs share the CPUs well.
			t.Parallel()
			s := startServer(t, []string{st.store(t), keys, "LOCKAPI_WEBHOOKS_ALLOW_PRIVATE=true"})
			out := runTool(t, dir, 2*time.Minute, []string{
				"LOCKAPI_URL=" + s.URL,
				"LOCKAPI_API_KEY=" + adminKey,
				"LOCKAPI_LIMITED_KEY=" + ciKey,
				"LOCKAPI_EXPIRED_KEY=" + expiredKey,
				"PYTHONPATH=src",
				"PYTHONDONTWRITEBYTECODE=1", // leave no __pycache__ in the source tree
			}, st.python, "-m", "unittest", "discover", "-s", "tests", "-v")
			if !regexp.MustCompile(`(?m)^Ran [1-9][0-9]* tests? in .*\n\nOK$`).Match(out) {
				t.Fatalf("the SDK's tests exited 0 without a plain \"OK\" (none skipped):\n%s", out)
			}
			if testing.Verbose() {
				t.Logf("unittest output:\n%s", out)
			}
		})
	}
}

// aPython is an interpreter found beside python3.
type aPython struct{ path, version string }

// otherPythons finds the Pythons >= minPython on this machine other than
// main's version, one per minor version: pyenv's ($PYENV_ROOT, else
// ~/.pyenv) and Debian's python3.N; of those, the oldest and the newest. It says so in the log when minPython
// is not among them.
func otherPythons(t *testing.T, main string) []aPython {
	t.Helper()
	version := func(path string) string {
		out, err := exec.Command(path, "-c", "import sys; print('%d.%d' % sys.version_info[:2])").Output()
		if err != nil {
			return ""
		}
		return strings.TrimSpace(string(out))
	}
	root := os.Getenv("PYENV_ROOT")
	if root == "" {
		if home, err := os.UserHomeDir(); err == nil {
			root = filepath.Join(home, ".pyenv")
		}
	}
	candidates, _ := filepath.Glob(filepath.Join(root, "versions", "*", "bin", "python3"))
	debian, _ := filepath.Glob("/usr/bin/python3.[0-9]*")
	candidates = append(candidates, debian...)
	seen := map[string]bool{version(main): true}
	var found []aPython
	for _, path := range candidates {
		if strings.HasSuffix(path, "-config") || strings.HasSuffix(path, "m") {
			continue
		}
		v := version(path)
		if v == "" || seen[v] || !atLeast(v, minPython) {
			continue
		}
		seen[v] = true
		found = append(found, aPython{path, v})
	}
	byVersion := func(a, b string) int {
		if a == b {
			return 0
		}
		if atLeast(a, b) {
			return 1
		}
		return -1
	}
	slices.SortFunc(found, func(a, b aPython) int { return byVersion(a.version, b.version) })
	if len(found) > 2 {
		// The oldest and the newest beside main's: the versions between
		// them break only what one of the ends breaks too, and each run
		// costs the suite's time (the whole suite keeps to 10 minutes).
		found = []aPython{found[0], found[len(found)-1]}
	}
	versions := []string{version(main)}
	for _, p := range found {
		versions = append(versions, p.version)
	}
	slices.SortFunc(versions, byVersion)
	t.Logf("pythons to run the suite on: %s", strings.Join(versions, ", "))
	if !seen[minPython] {
		// Not a failure: the claim rests on the machines that have it (this
		// project's own, with pyenv's 3.9); a machine without it still
		// tests every version it has.
		t.Logf("no Python %s found (python3, pyenv's or Debian's): the floor goes untested here", minPython)
	}
	return found
}

// atLeast reports whether the version "major.minor" v is at least min.
func atLeast(v, min string) bool {
	parse := func(s string) (int, int) {
		major, minor, _ := strings.Cut(s, ".")
		a, _ := strconv.Atoi(major)
		b, _ := strconv.Atoi(minor)
		return a, b
	}
	va, vb := parse(v)
	ma, mb := parse(min)
	return va > ma || (va == ma && vb >= mb)
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

// minTypeCompleteness is the least share of the Python SDK's public API
// whose types pyright --verifytypes finds known (1 is every symbol).
const minTypeCompleteness = 0.95

// TestPythonSDKTypes type-checks the Python SDK with pyright, the npm
// package pinned in sdk/python/package.json and installed by npm ci from
// the registry or its cache, as the TypeScript SDK's dependencies are: the
// package and its tests under pyproject.toml's [tool.pyright] (strict for
// the package), and pyright --verifytypes lockapi, whose completeness
// score of the public API must stay at least minTypeCompleteness.
//
// It needs node and npm; without them it is skipped, unless CI is set.
func TestPythonSDKTypes(t *testing.T) {
	t.Parallel()
	node := lookTool(t, "node")
	npm := lookTool(t, "npm")
	checkNodeVersion(t, node)
	dir, err := filepath.Abs(filepath.Join("..", "sdk", "python"))
	if err != nil {
		t.Fatal(err)
	}
	runTool(t, dir, 10*time.Minute, nil, npm, "ci", "--no-audit", "--no-fund")
	pyright := filepath.Join(dir, "node_modules", ".bin", "pyright")
	t.Logf("pyright (strict for the package):\n%s", runTool(t, dir, 3*time.Minute, nil, pyright))

	// --verifytypes exits 1 when any symbol's type is not known: the score
	// decides, not the status.
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, pyright, "--verifytypes", "lockapi", "--ignoreexternal", "--outputjson")
	cmd.Dir = dir
	// --verifytypes finds the package where the Python pyright asks for its
	// search paths finds it (config's extraPaths do not count).
	cmd.Env = append(os.Environ(), "PYTHONPATH=src")
	out, err := cmd.Output()
	var exit *exec.ExitError
	if err != nil && (!errors.As(err, &exit) || exit.ExitCode() != 1) {
		t.Fatalf("pyright --verifytypes: %v\n%s", err, out)
	}
	var report struct {
		TypeCompleteness struct {
			CompletenessScore float64 `json:"completenessScore"`
			Symbols           []struct {
				Name        string `json:"name"`
				Diagnostics []struct {
					Message string `json:"message"`
				} `json:"diagnostics"`
			} `json:"symbols"`
		} `json:"typeCompleteness"`
	}
	if err := json.Unmarshal(out, &report); err != nil {
		t.Fatalf("pyright --verifytypes --outputjson: %v\n%s", err, out)
	}
	score := report.TypeCompleteness.CompletenessScore
	t.Logf("pyright --verifytypes lockapi: %.1f %% of the public API's types known", score*100)
	if score < minTypeCompleteness {
		for _, s := range report.TypeCompleteness.Symbols {
			for _, d := range s.Diagnostics {
				t.Logf("%s: %s", s.Name, d.Message)
			}
		}
		t.Fatalf("type completeness %.1f %%, below %.0f %%", score*100, minTypeCompleteness*100)
	}
}

// TestPythonSDKWheel builds the Python SDK's wheel as a release would
// (python3 -m build; docs/SDK_PYTHON.md), from a copy of sdk/python so that
// the build leaves nothing in the tree, with --no-isolation: the build
// backend is the installed setuptools (Debian's python3-setuptools and
// python3-wheel, beside python3-build), not one downloaded. The wheel must
// hold the package and its py.typed marker, and state the Python floor the
// tests ran on.
//
// The interpreter is python3, or Debian's /usr/bin/python3 where python3
// is another one (pyenv's) without those modules.
func TestPythonSDKWheel(t *testing.T) {
	t.Parallel()
	python := ""
	for _, p := range []string{lookPython(t), "/usr/bin/python3"} {
		if exec.Command(p, "-c", "import build, setuptools, wheel").Run() == nil {
			python = p
			break
		}
	}
	if python == "" {
		missingTool(t, "python3 -m build needs the modules build, setuptools and wheel (on Debian: apt-get install python3-build python3-setuptools python3-wheel)")
	}
	src, err := filepath.Abs(filepath.Join("..", "sdk", "python"))
	if err != nil {
		t.Fatal(err)
	}
	// What the build reads: not node_modules (TestPythonSDKTypes installs
	// pyright there meanwhile) nor the tests.
	dir := t.TempDir()
	if err := os.CopyFS(filepath.Join(dir, "src"), os.DirFS(filepath.Join(src, "src"))); err != nil {
		t.Fatal(err)
	}
	names, err := filepath.Glob(filepath.Join(src, "*"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		if fi, err := os.Stat(name); err != nil || !fi.Mode().IsRegular() {
			continue
		}
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(name)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out := filepath.Join(dir, "dist")
	runTool(t, dir, 3*time.Minute, []string{"PYTHONDONTWRITEBYTECODE=1"}, python, "-m", "build", "--wheel", "--no-isolation", "--outdir", out)
	wheels, err := filepath.Glob(filepath.Join(out, "lockapi-*-py3-none-any.whl"))
	if err != nil || len(wheels) != 1 {
		t.Fatalf("want one pure-Python wheel in %s, found %v (%v)", out, wheels, err)
	}
	zr, err := zip.OpenReader(wheels[0])
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
	files := map[string]*zip.File{}
	for _, f := range zr.File {
		files[f.Name] = f
	}
	for _, want := range []string{"lockapi/__init__.py", "lockapi/_transport.py", "lockapi/py.typed"} {
		if files[want] == nil {
			t.Errorf("the wheel lacks %s", want)
		}
	}
	var metadata []byte
	for name, f := range files {
		if strings.HasSuffix(name, ".dist-info/METADATA") {
			r, err := f.Open()
			if err != nil {
				t.Fatal(err)
			}
			metadata, err = io.ReadAll(r)
			r.Close()
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	if want := "Requires-Python: >=" + minPython; !strings.Contains(string(metadata), want+"\n") {
		t.Errorf("the wheel's METADATA lacks %q:\n%s", want, metadata)
	}
	t.Logf("built %s with %s", filepath.Base(wheels[0]), python)
}
