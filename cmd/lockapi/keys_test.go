package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/lockapi/lockapi/internal/auth"
)

func TestKeysNew(t *testing.T) {
	var out, errOut bytes.Buffer
	code := run(context.Background(), []string{"keys", "new", "--principal", "ci", "--scopes", "locks:read,locks:write", "--patterns", "ci:*,deploy:*"}, &out, &errOut)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	var key, line string
	for _, l := range strings.Split(out.String(), "\n") {
		if v, ok := strings.CutPrefix(l, "key:  "); ok {
			key = v
		}
		if v, ok := strings.CutPrefix(l, "line: "); ok {
			line = v
		}
	}
	if key == "" || line == "" || strings.Contains(line, key) {
		t.Fatalf("output:\n%s", out.String())
	}
	ring, err := auth.ParseKeys(line)
	if err != nil {
		t.Fatal(err)
	}
	k, err := ring.Authenticate(key, time.Now().AddDate(100, 0, 0))
	if err != nil || k.Principal != "ci" || !k.MayUse("deploy:prod") || k.Has(auth.ScopeAdmin) {
		t.Fatalf("the printed line does not configure the printed key: %+v, %v", k, err)
	}

	for _, bad := range [][]string{
		{"keys"},
		{"keys", "new"},
		{"keys", "new", "--principal", "ci", "--scopes", "root"},
		{"keys", "new", "--principal", "ci", "--patterns", "a b"},
		{"keys", "new", "--principal", "ci", "--expires", "0s"},
		{"keys", "new", "--principal", "ci", "--expires", "-1h"},
		{"keys", "new", "--principal", "ci", "--expires-at", "2030-01-01"},
		{"keys", "new", "--principal", "ci", "--expires-at", "2030-01-01T00:00:00+01:00"},
		{"keys", "new", "--principal", "ci", "--expires-at", "2020-01-01T00:00:00Z"}, // past
		{"keys", "new", "--principal", "ci", "--expires", "1h", "--expires-at", "2099-01-01T00:00:00Z"},
	} {
		if code := run(context.Background(), bad, &out, &errOut); code != 2 {
			t.Errorf("%v: exit %d, want 2", bad, code)
		}
	}
}

// keysNew runs "lockapi keys new" with args and returns the printed key and
// line, read the way scripts read them: by their "key:  " and "line: "
// prefixes.
func keysNew(t *testing.T, args ...string) (key, line string) {
	t.Helper()
	var out, errOut bytes.Buffer
	if code := run(context.Background(), append([]string{"keys", "new"}, args...), &out, &errOut); code != 0 {
		t.Fatalf("%v: exit %d: %s", args, code, errOut.String())
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != 2 {
		t.Fatalf("want two lines, got:\n%s", out.String())
	}
	key, ok1 := strings.CutPrefix(lines[0], "key:  ")
	line, ok2 := strings.CutPrefix(lines[1], "line: ")
	if !ok1 || !ok2 {
		t.Fatalf("want \"key:  \" then \"line: \", got:\n%s", out.String())
	}
	return key, line
}

func TestKeysNew_expires(t *testing.T) {
	t.Run("Duration", func(t *testing.T) {
		before := time.Now()
		key, line := keysNew(t, "--principal", "ci", "--expires", "720h")
		ring, err := auth.ParseKeys(line)
		if err != nil {
			t.Fatal(err)
		}
		k, err := ring.Authenticate(key, before)
		if err != nil {
			t.Fatal(err)
		}
		if want := before.Add(720 * time.Hour); k.Expires.Before(want.Add(-time.Second)) || k.Expires.After(want.Add(time.Minute)) {
			t.Fatalf("expires %v, want about %v (line %q)", k.Expires, want, line)
		}
	})
	t.Run("At", func(t *testing.T) {
		key, line := keysNew(t, "--principal", "ci", "--expires-at", "2099-01-31T00:00:00Z")
		if !strings.HasSuffix(line, " expires=2099-01-31T00:00:00Z") {
			t.Fatalf("line %q", line)
		}
		ring, err := auth.ParseKeys(line)
		if err != nil {
			t.Fatal(err)
		}
		var expired *auth.ExpiredKeyError
		if _, err := ring.Authenticate(key, time.Date(2099, 1, 31, 0, 0, 0, 0, time.UTC)); !errors.As(err, &expired) {
			t.Fatalf("at the expiry: %v, want an ExpiredKeyError", err)
		}
	})
	t.Run("Never", func(t *testing.T) {
		if _, line := keysNew(t, "--principal", "ci"); strings.Contains(line, "expires=") {
			t.Fatalf("a key without --expires has a line with expires=: %q", line)
		}
	})
}

// TestLoadSecurity_expiredKey: a configured key that has expired starts the
// server with one warning that names its principal, never the key.
func TestLoadSecurity_expiredKey(t *testing.T) {
	oldKey, oldLine, err := auth.NewExpiringKey("old-ci", []auth.Scope{auth.ScopeRead}, []string{"*"}, time.Now().Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	_, newLine, err := auth.NewExpiringKey("new-ci", []auth.Scope{auth.ScopeRead}, []string{"*"}, time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	keys, _, _, err := loadSecurity(serveConfig{APIKeys: oldLine + ";" + newLine}, zerolog.New(&logs))
	if err != nil || keys.Len() != 2 {
		t.Fatalf("keys %d, %v", keys.Len(), err)
	}
	var warnings []string
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, `"level":"warn"`) {
			warnings = append(warnings, l)
		}
	}
	if len(warnings) != 1 || !strings.Contains(warnings[0], `"principal":"old-ci"`) || !strings.Contains(warnings[0], "expired") {
		t.Fatalf("want one warning naming old-ci, got:\n%s", logs.String())
	}
	if strings.Contains(logs.String(), oldKey) {
		t.Fatal("the log holds the key")
	}
}

// A key line whose expires= does not read stops serve with one line that
// says so, and never echoes the line (it might be a pasted key).
func TestConfig_bad_expires_is_one_line(t *testing.T) {
	clearEnvironment(t)
	_, line, err := auth.NewKey("ci", []auth.Scope{auth.ScopeRead}, []string{"*"})
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("LOCKAPI_API_KEYS", line+" expires=2027-01-31")
	r := serveOnce(t, "serve", "--addr", "127.0.0.1:0")
	wantOneLine(t, r, "lockapi serve: LOCKAPI_API_KEYS")
	if !strings.Contains(r.Stderr, "key line 1's expires= is not an RFC 3339 UTC time") || strings.Contains(r.Stderr, line) {
		t.Fatalf("stderr: %s", r.Stderr)
	}
}
