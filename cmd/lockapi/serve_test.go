package main

import (
	"context"
	"strings"
	"testing"
)

// serveInProcess runs `lockapi serve args...` on a loopback port until the
// test ends, and returns the run once it listens.
func serveInProcess(t *testing.T, args ...string) *Run {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := start(ctx, append([]string{"serve", "--addr", "127.0.0.1:0"}, args...)...)
	t.Cleanup(func() {
		cancel()
		if res := r.Wait(t, promptly); res.Code != 0 {
			t.Errorf("serve exited %d\nstderr: %s", res.Code, res.Stderr)
		}
	})
	select {
	case <-r.Stderr.Seen("lockapi listening"):
	case res := <-r.done:
		r.done <- res
		t.Fatalf("serve exited %d before it listened\nstderr: %s", res.Code, res.Stderr)
	}
	return r
}

// A LOCKAPI_* variable that does not parse stops the server at startup,
// naming the variable, rather than being replaced by its default.
func TestServe_bad_environment_is_fatal(t *testing.T) {
	t.Setenv("LOCKAPI_REDIS_URL", "")
	for _, tc := range []struct{ env, value string }{
		{"LOCKAPI_MAX_TTL", "5x"},
		{"LOCKAPI_DEFAULT_TTL", "30"},
		{"LOCKAPI_MAX_WAITERS", "many"},
		{"LOCKAPI_EVENTS_MAX", "1e6"},
		{"LOCKAPI_RATE_LIMIT", "fast"},
		{"LOCKAPI_METRICS", "yes"},
	} {
		t.Run(tc.env, func(t *testing.T) {
			t.Setenv(tc.env, tc.value)
			r := lockapi(t, "serve", "--addr", "127.0.0.1:0")
			if r.Code != exitUsage || !strings.Contains(r.Stderr, "$"+tc.env+` "`+tc.value+`"`) || strings.Contains(r.Stderr, "listening") {
				t.Fatalf("exit %d, want %d naming $%s\nstderr: %s", r.Code, exitUsage, tc.env, r.Stderr)
			}
		})
	}

	t.Run("ErrEvery_bad_variable_named", func(t *testing.T) {
		t.Setenv("LOCKAPI_MAX_WAIT", "soon")
		t.Setenv("LOCKAPI_MAX_WAITERS", "-")
		r := lockapi(t, "serve", "--addr", "127.0.0.1:0")
		if r.Code != exitUsage || !strings.Contains(r.Stderr, "$LOCKAPI_MAX_WAIT ") || !strings.Contains(r.Stderr, "$LOCKAPI_MAX_WAITERS ") {
			t.Fatalf("exit %d\nstderr: %s", r.Code, r.Stderr)
		}
	})

	t.Run("OK_flag_wins_over_a_bad_variable", func(t *testing.T) {
		t.Setenv("LOCKAPI_MAX_TTL", "5x")
		serveInProcess(t, "--max-ttl", "1h")
	})
}

// Every flag's help names its argument by its type: the flag package takes
// a `quoted` word of the help text for the argument's name instead.
func TestServe_help(t *testing.T) {
	r := lockapi(t, "serve", "-h")
	if r.Code != 0 {
		t.Fatalf("exit %d\nstderr: %s", r.Code, r.Stderr)
	}
	for _, want := range []string{"-api-keys string", "-max-ttl duration", "-max-waiters int", "-rate-limit float", "lockapi keys new"} {
		if !strings.Contains(r.Stderr, want) {
			t.Errorf("help lacks %q:\n%s", want, r.Stderr)
		}
	}
	for _, line := range strings.Split(r.Stderr, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "-") && strings.Count(line, " ") > 3 {
			t.Errorf("a flag line names an argument of several words: %q", line)
		}
	}
}
