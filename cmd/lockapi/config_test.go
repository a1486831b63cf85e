package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// clearEnvironment unsets every variable of serve's table for the test, so
// that the machine's own LOCKAPI_* settings do not leak in.
func clearEnvironment(t *testing.T) {
	t.Helper()
	var c serveConfig
	for _, s := range c.settings() {
		t.Setenv(envName(s.name), "")
	}
}

// badTexts is a text that does not read, for each kind of value in serve's
// table (by its argument's name in help). A new kind without one fails
// TestConfig_every_bad_variable_is_one_line.
var badTexts = map[string]string{
	"HOST:PORT":                       "8080",
	"URL":                             "localhost:6379",
	"TEXT":                            "{ci}:",
	"DURATION":                        "30",
	"N":                               "-1",
	"BYTES":                           "512MB",
	"RATE":                            "fast",
	"FILE":                            "/nonexistent/lockapi",
	"LINES":                           "lka_pasted_the_key_itself",
	"SECRETS":                         "short",
	"true|false":                      "yes",
	"single|sentinel|cluster|redlock": "sentinal",
	"debug|info|warn|error":           "verbose",
	"json|console":                    "text",
}

// Every LOCKAPI_* variable of the table, set to a text that does not read,
// stops serve with status 2 and one line that names the variable, the text
// (unless it may be a secret) and the form wanted.
func TestConfig_every_bad_variable_is_one_line(t *testing.T) {
	clearEnvironment(t)
	var c serveConfig
	for _, s := range c.settings() {
		env := envName(s.name)
		t.Run(env, func(t *testing.T) {
			text, ok := badTexts[s.value.arg]
			if !ok {
				t.Fatalf("no bad text for values of kind %q: add one to badTexts", s.value.arg)
			}
			t.Setenv(env, text)
			args := []string{"serve", "--addr", "127.0.0.1:0"}
			if s.name == "addr" {
				args = args[:1]
			}
			r := serveOnce(t, args...)
			wantOneLine(t, r, "lockapi serve: "+env)
			if !strings.Contains(r.Stderr, ": want ") && !strings.Contains(r.Stderr, "; want ") {
				t.Errorf("the line does not say what is wanted: %s", r.Stderr)
			}
			shown := strings.Contains(r.Stderr, "="+`"`+text+`"`)
			if s.value.secret == shown {
				t.Errorf("secret %v, the text shown %v:\n%s", s.value.secret, shown, r.Stderr)
			}
		})
	}
}

// A few flags with a bad text: one line that names the flag, not the
// variable, and no usage.
func TestConfig_bad_flag_is_one_line(t *testing.T) {
	clearEnvironment(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"serve", "--addr", "8080"}, `lockapi serve: --addr="8080": want host:port`},
		{[]string{"serve", "--redis-url", "localhost:6379"}, `lockapi serve: --redis-url="localhost:6379": want redis://host:port/db`},
		{[]string{"serve", "--redis-mode", "sentinal"}, `lockapi serve: --redis-mode="sentinal": want single, sentinel, cluster or redlock`},
		{[]string{"serve", "--max-ttl", "5x"}, `lockapi serve: --max-ttl="5x": want a positive duration`},
		{[]string{"serve", "--rate-limit", "-1"}, `lockapi serve: --rate-limit="-1": want a number of requests per second`},
		{[]string{"serve", "--nonsense"}, "lockapi serve: flag provided but not defined: -nonsense (lockapi serve -h says more)"},
		{[]string{"run", "--ttl", "30", "x", "--", "true"}, `lockapi run: --ttl="30": want a duration with a unit, such as 30s`},
		{[]string{"run", "x", "--limit", "20000", "true"}, `lockapi run: --limit="20000": want a number of permits from 1 to 10000`},
		{[]string{"keys", "new"}, "lockapi keys new: missing --principal NAME"},
		{[]string{"status"}, "lockapi status: want one lock NAME, got 0 (lockapi status -h says more)"},
		{[]string{"nonsense"}, `lockapi: unknown command "nonsense" (lockapi -h lists the commands)`},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			wantOneLine(t, serveOnce(t, tc.args...), tc.want)
		})
	}
}

// The settings no one of them can check alone name the one the user gave.
func TestConfig_settings_checked_together(t *testing.T) {
	clearEnvironment(t)
	dir := t.TempDir()
	pem := filepath.Join(dir, "cert.pem")
	if err := os.WriteFile(pem, []byte("not PEM"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		env  []string
		args []string
		want string
	}{
		{"ErrDefaultTTLAboveMaxTTL", []string{"LOCKAPI_DEFAULT_TTL=25h"}, nil, `LOCKAPI_DEFAULT_TTL="25h": want at most the largest TTL, 24h (LOCKAPI_MAX_TTL)`},
		{"ErrMaxTTLBelowDefaultTTL", nil, []string{"--max-ttl", "10s"}, `--max-ttl="10s": want at least the default TTL, 30s (--default-ttl)`},
		{"ErrMinReplicasOnMemory", []string{"LOCKAPI_MIN_REPLICAS=1"}, nil, `LOCKAPI_MIN_REPLICAS="1": want 0 on the embedded memory store`},
		{"ErrTLSCertWithoutKey", []string{"LOCKAPI_TLS_CERT=" + pem}, nil, `LOCKAPI_TLS_CERT="` + pem + `": want LOCKAPI_TLS_KEY with it`},
		{"ErrTLSNotPEM", []string{"LOCKAPI_TLS_CERT=" + pem, "LOCKAPI_TLS_KEY=" + pem}, nil, `LOCKAPI_TLS_CERT="` + pem + `": tls: failed to find any PEM data`},
		{"ErrRedisTLSWithoutRediss", []string{"LOCKAPI_REDIS_URL=redis://localhost:6379/0", "LOCKAPI_REDIS_TLS_CA=" + pem}, nil, `LOCKAPI_REDIS_TLS_CA="` + pem + `": want a rediss:// URL in LOCKAPI_REDIS_URL`},
		{"ErrBackoffMaxBelowMin", []string{"LOCKAPI_WEBHOOKS_BACKOFF_MIN=1h"}, nil, `LOCKAPI_WEBHOOKS_BACKOFF_MIN="1h": want at most LOCKAPI_WEBHOOKS_BACKOFF_MAX, 30m`},
		{"ErrWebhooksFileNotJSON", []string{"LOCKAPI_WEBHOOKS_FILE=" + pem}, nil, `LOCKAPI_WEBHOOKS_FILE="` + pem + `": `},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, kv := range tc.env {
				k, v, _ := strings.Cut(kv, "=")
				t.Setenv(k, v)
			}
			wantOneLine(t, serveOnce(t, append([]string{"serve", "--addr", "127.0.0.1:0"}, tc.args...)...), "lockapi serve: "+tc.want)
		})
	}
}

// serveOnce runs lockapi args... with a context that has ended: a server
// that should have refused its configuration stops at once rather than
// serving until the test times out.
func serveOnce(t *testing.T, args ...string) Result {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return start(ctx, args...).Wait(t, promptly)
}

// wantOneLine wants r to have failed with status 2 and one line on stderr
// that starts with want (which says what is wanted, where it is a value).
func wantOneLine(t *testing.T, r Result, want string) {
	t.Helper()
	if r.Code != exitUsage || strings.Count(r.Stderr, "\n") != 1 || !strings.HasPrefix(r.Stderr, want) {
		t.Errorf("exit %d, want %d and one line starting %q\nstderr: %s", r.Code, exitUsage, want, r.Stderr)
	}
}
