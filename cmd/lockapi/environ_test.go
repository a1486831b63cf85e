package main

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/lockapi/lockapi/internal/auth"
)

// misspelt are the names the docs misspell on purpose (this file's own
// are not looked at).
var misspelt = map[string]bool{
	"LOCKAPI_REDIS_ULR": true,
}

// A LOCKAPI_* variable that is no setting is one warning line each, with
// the setting meant when one is close; the server starts all the same.
// The client's, lockapi run's and the test suites' names are no warning.
func TestEnviron_unknown_variable_is_a_warning(t *testing.T) {
	clearEnvironment(t)
	t.Setenv("LOCKAPI_REDIS_ULR", "redis://127.0.0.1:1/0")
	t.Setenv("LOCKAPI_API_KEY_FILE", "/nonexistent/keys")
	t.Setenv("LOCKAPI_NOT_A_SETTING", "1")
	t.Setenv("LOCKAPI_SERVER", "http://127.0.0.1:1")
	t.Setenv("LOCKAPI_API_KEY", "lka_client_side")
	t.Setenv("LOCKAPI_TEST_SOMETHING_URL", "redis://127.0.0.1:1/0")
	t.Setenv("LOCKAPI_LINEARIZE_OPS", "10")
	r := serveOnce(t, "serve", "--addr", "127.0.0.1:0")
	if r.Code != 0 {
		t.Fatalf("exit %d, want 0: unknown variables are warnings\nstderr: %s", r.Code, r.Stderr)
	}
	for _, want := range []string{
		"LOCKAPI_REDIS_ULR is not a lockapi setting; did you mean LOCKAPI_REDIS_URL?",
		"LOCKAPI_API_KEY_FILE is not a lockapi setting; did you mean LOCKAPI_API_KEYS_FILE?",
		`LOCKAPI_NOT_A_SETTING is not a lockapi setting"`,
	} {
		if n := strings.Count(r.Stderr, want); n != 1 {
			t.Errorf("%q logged %d times, want once:\n%s", want, n, r.Stderr)
		}
	}
	for line := range strings.Lines(r.Stderr) {
		if strings.Contains(line, "is not a lockapi setting") && !strings.Contains(line, `"level":"warn"`) {
			t.Errorf("not a warning: %s", line)
		}
	}
	for _, known := range []string{"LOCKAPI_SERVER", "LOCKAPI_API_KEY is not", "LOCKAPI_TEST_", "LOCKAPI_LINEARIZE_OPS", "LOCKAPI_ADDR"} {
		if strings.Contains(r.Stderr, known) {
			t.Errorf("%s is lockapi's, yet named:\n%s", known, r.Stderr)
		}
	}
	if strings.Count(r.Stderr, "is not a lockapi setting") != 3 {
		t.Errorf("want 3 unknown variables named:\n%s", r.Stderr)
	}
}

// A server with no keys started with LOCKAPI_API_KEY (the clients' name,
// most likely a misspelling of LOCKAPI_API_KEYS) says so, as a warning, once;
// with keys of its own it does not.
func TestEnviron_client_key_on_a_server_without_keys(t *testing.T) {
	const want = "LOCKAPI_API_KEY is read by clients; the server's keys are LOCKAPI_API_KEYS or LOCKAPI_API_KEYS_FILE"
	clearEnvironment(t)
	t.Setenv("LOCKAPI_API_KEY", "lka_client_side")
	r := serveOnce(t, "serve", "--addr", "127.0.0.1:0")
	if r.Code != 0 {
		t.Fatalf("exit %d, want 0\nstderr: %s", r.Code, r.Stderr)
	}
	if n := strings.Count(r.Stderr, want); n != 1 {
		t.Fatalf("%q logged %d times, want once:\n%s", want, n, r.Stderr)
	}
	for line := range strings.Lines(r.Stderr) {
		if strings.Contains(line, want) && !strings.Contains(line, `"level":"warn"`) {
			t.Errorf("not a warning: %s", line)
		}
	}

	_, line, err := auth.NewKey("svc", []auth.Scope{auth.ScopeAdmin}, []string{"*"})
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("LOCKAPI_API_KEYS", line)
	if r := serveOnce(t, "serve", "--addr", "127.0.0.1:0"); r.Code != 0 || strings.Contains(r.Stderr, want) {
		t.Fatalf("with keys: exit %d, stderr:\n%s", r.Code, r.Stderr)
	}
}

// LOCKAPI_STRICT_ENV=true refuses an unknown variable: exit 2, one line
// each, before anything starts.
func TestEnviron_strict_refuses_unknown_variables(t *testing.T) {
	clearEnvironment(t)
	t.Setenv("LOCKAPI_STRICT_ENV", "true")
	t.Setenv("LOCKAPI_REDIS_ULR", "redis://127.0.0.1:1/0")
	wantOneLine(t, serveOnce(t, "serve", "--addr", "127.0.0.1:0"),
		"lockapi serve: LOCKAPI_REDIS_ULR is not a lockapi setting; did you mean LOCKAPI_REDIS_URL? (LOCKAPI_STRICT_ENV=true refuses it)")

	t.Setenv("LOCKAPI_NOT_A_SETTING", "1")
	r := serveOnce(t, "serve", "--addr", "127.0.0.1:0")
	if r.Code != exitUsage || strings.Count(r.Stderr, "\n") != 2 || !strings.Contains(r.Stderr, "lockapi serve: LOCKAPI_NOT_A_SETTING is not a lockapi setting (LOCKAPI_STRICT_ENV=true refuses it)\n") {
		t.Errorf("exit %d, want %d and two lines\nstderr: %s", r.Code, exitUsage, r.Stderr)
	}

	// Strict with only known names starts.
	t.Setenv("LOCKAPI_REDIS_ULR", "")
	t.Setenv("LOCKAPI_NOT_A_SETTING", "")
	os.Unsetenv("LOCKAPI_REDIS_ULR")
	os.Unsetenv("LOCKAPI_NOT_A_SETTING")
	t.Setenv("LOCKAPI_SERVER", "http://127.0.0.1:1")
	if r := serveOnce(t, "serve", "--addr", "127.0.0.1:0"); r.Code != 0 {
		t.Errorf("exit %d with known names only\nstderr: %s", r.Code, r.Stderr)
	}
}

// The closest setting is suggested only when it is close.
func TestEnviron_closest(t *testing.T) {
	var c serveConfig
	var names []string
	for _, s := range c.settings() {
		names = append(names, envName(s.name))
	}
	for typo, want := range map[string]string{
		"LOCKAPI_REDIS_ULR":        "LOCKAPI_REDIS_URL",
		"LOCKAPI_REDISURL":         "LOCKAPI_REDIS_URL",
		"LOCKAPI_MAX_WAITER":       "LOCKAPI_MAX_WAITERS",
		"LOCKAPI_LOGLEVEL":         "LOCKAPI_LOG_LEVEL",
		"LOCKAPI_RELEASE_SECRET":   "LOCKAPI_RELEASE_SECRETS",
		"LOCKAPI_WEBHOOK_FILE":     "LOCKAPI_WEBHOOKS_FILE",
		"LOCKAPI_DEFUALT_TTL":      "LOCKAPI_DEFAULT_TTL",
		"LOCKAPI_NOT_A_SETTING":    "",
		"LOCKAPI_X":                "",
		"LOCKAPI_PASSWORD":         "",
		"LOCKAPI_COMPLETELY_OTHER": "",
	} {
		if got := closest(typo, names); got != want {
			t.Errorf("closest(%s) = %q, want %q", typo, got, want)
		}
	}
}

// Every LOCKAPI_* name anywhere in the repository is a setting, or one of
// the names serve knows are lockapi's (otherNames, LOCKAPI_TEST_*); and
// docs/CONFIGURATION.md names each. A new name fails here until it is
// added to one or the other.
func TestEnviron_every_name_in_the_repository_is_known(t *testing.T) {
	var c serveConfig
	known := map[string]bool{}
	for _, s := range c.settings() {
		known[envName(s.name)] = true
	}
	for name := range otherNames {
		known[name] = true
	}
	re := regexp.MustCompile(`LOCKAPI_[A-Z0-9_]*[A-Z0-9]`)
	seen := map[string]string{}
	root := filepath.Join("..", "..")
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); n == ".git" || n == "node_modules" || n == "dist" || n == ".venv" || n == "__pycache__" {
				return filepath.SkipDir
			}
			return nil
		}
		if d.Name() == "environ_test.go" {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, name := range re.FindAllString(string(b), -1) {
			seen[name] = path
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join(root, "docs", "CONFIGURATION.md"))
	if err != nil {
		t.Fatal(err)
	}
	for name, path := range seen {
		if strings.HasPrefix(name+"_", testPrefix) {
			continue // LOCKAPI_TEST_* itself, and the names it covers
		}
		switch {
		case misspelt[name]:
		case !known[name]:
			t.Errorf("%s (in %s) is neither a setting nor in otherNames: serve would warn about it", name, path)
		case !strings.Contains(string(doc), "`"+name+"`"):
			t.Errorf("%s (in %s) is not in docs/CONFIGURATION.md", name, path)
		}
	}
}

// lockapi --version and -v print what lockapi version prints.
func TestVersion_flags(t *testing.T) {
	want := lockapi(t, "version")
	for _, arg := range []string{"--version", "-v", "-version"} {
		if r := lockapi(t, arg); r != want {
			t.Errorf("lockapi %s: exit %d\nstdout: %s\nstderr: %s\nwant the output of lockapi version:\n%s", arg, r.Code, r.Stdout, r.Stderr, want.Stdout)
		}
	}
}
