package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockapi/lockapi/internal/testkit/redistest"
)

// served is a `lockapi serve` running in-process.
type served struct {
	*Run
	URL  string
	stop func() Result
}

// serveInProcess runs `lockapi serve args...` on a loopback port until the
// test ends or Stop, and returns it once it listens.
func serveInProcess(t *testing.T, args ...string) *served {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := start(ctx, append([]string{"serve", "--addr", "127.0.0.1:0"}, args...)...)
	s := &served{Run: r, stop: sync.OnceValue(func() Result {
		cancel()
		res := r.Wait(t, promptly)
		if res.Code != 0 {
			t.Errorf("serve exited %d\nstderr: %s", res.Code, res.Stderr)
		}
		return res
	})}
	t.Cleanup(func() { s.stop() })
	select {
	case <-r.Stderr.Seen("lockapi listening"):
	case res := <-r.done:
		r.done <- res
		t.Fatalf("serve exited %d before it listened\nstderr: %s", res.Code, res.Stderr)
	case <-time.After(promptly):
		t.Fatalf("serve did not listen within %v\nstderr: %s", promptly, r.Stderr)
	}
	for line := range strings.Lines(r.Stderr.String()) {
		var l struct {
			Message string `json:"message"`
			URL     string `json:"url"`
		}
		if json.Unmarshal([]byte(line), &l) == nil && l.Message == "lockapi listening" {
			s.URL = l.URL
		}
	}
	if s.URL == "" {
		t.Fatalf("no URL in the listening line:\n%s", r.Stderr)
	}
	return s
}

// Stop stops the server as SIGTERM would.
func (s *served) Stop() Result { return s.stop() }

// A LOCKAPI_* variable that does not parse stops the server at startup,
// naming the variable, rather than being replaced by its default.
func TestServe_bad_environment_is_fatal(t *testing.T) {
	clearEnvironment(t)
	t.Run("ErrEvery_bad_variable_named", func(t *testing.T) {
		t.Setenv("LOCKAPI_MAX_WAIT", "soon")
		t.Setenv("LOCKAPI_MAX_WAITERS", "-")
		r := lockapi(t, "serve", "--addr", "127.0.0.1:0")
		if r.Code != exitUsage || !strings.Contains(r.Stderr, `LOCKAPI_MAX_WAIT="soon"`) || !strings.Contains(r.Stderr, `LOCKAPI_MAX_WAITERS="-"`) {
			t.Fatalf("exit %d\nstderr: %s", r.Code, r.Stderr)
		}
	})

	t.Run("OK_flag_wins_over_a_bad_variable", func(t *testing.T) {
		t.Setenv("LOCKAPI_MAX_TTL", "5x")
		serveInProcess(t, "--max-ttl", "1h")
	})
}

// releaseURL acquires name on s and returns the lease's release_url.
func releaseURL(t *testing.T, s *served, name string) string {
	t.Helper()
	resp, err := http.Post(s.URL+"/v1/locks/"+name+"/leases", "application/json", strings.NewReader(`{"owner":"w","ttl_ms":60000}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var l struct {
		ReleaseURL string `json:"release_url"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&l); err != nil || resp.StatusCode != http.StatusCreated || l.ReleaseURL == "" {
		t.Fatalf("acquire %s: %d, %+v, %v", name, resp.StatusCode, l, err)
	}
	return l.ReleaseURL
}

// mustRelease POSTs a release URL to s and wants the lease released.
func mustRelease(t *testing.T, s *served, url, what string) {
	t.Helper()
	resp, err := http.Post(s.URL+url, "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"released":true`) {
		t.Fatalf("%s: %d %s", what, resp.StatusCode, body)
	}
}

// With Redis and no LOCKAPI_RELEASE_SECRETS, instances share the secret
// kept in Redis: a release URL from one works on another, and on the same
// instance after a restart.
func TestServe_release_URLs_shared_through_Redis(t *testing.T) {
	t.Setenv("LOCKAPI_RELEASE_SECRETS", "")
	rs := redistest.Start(t)
	args := []string{"--redis-url", rs.URL, "--key-prefix", "servetest:", "--log-level", "debug"}
	a, b := serveInProcess(t, args...), serveInProcess(t, args...)
	if !strings.Contains(a.Stderr.String(), "secret kept in Redis") || strings.Contains(a.Stderr.String(), "random secret") {
		t.Errorf("startup does not say where the release secret comes from:\n%s", a.Stderr)
	}

	mustRelease(t, b, releaseURL(t, a, "across"), "A's release URL on B")

	url := releaseURL(t, a, "restart")
	a.Stop()
	mustRelease(t, serveInProcess(t, args...), url, "a release URL after its instance restarted")

	secret, err := rs.Client(t).Get(context.Background(), "servetest:release-secret").Result()
	if err != nil || len(secret) < 32 {
		t.Fatalf("servetest:release-secret = %q, %v", secret, err)
	}
	for _, s := range []*served{a, b} {
		if strings.Contains(s.Stderr.String(), secret) {
			t.Errorf("the release secret is in the logs:\n%s", s.Stderr)
		}
	}

	// A value too short to be a secret is refused, not used.
	if err := rs.Client(t).Set(context.Background(), "badsecret:release-secret", "short", 0).Err(); err != nil {
		t.Fatal(err)
	}
	r := lockapi(t, "serve", "--addr", "127.0.0.1:0", "--redis-url", rs.URL, "--key-prefix", "badsecret:")
	if r.Code != exitUsage || !strings.Contains(r.Stderr, "badsecret:release-secret") {
		t.Errorf("a short secret in Redis: exit %d\nstderr: %s", r.Code, r.Stderr)
	}
}

// On the memory store with no LOCKAPI_RELEASE_SECRETS, serve itself signs
// with a random secret, and says so: its release URLs work while it runs.
func TestServe_release_URLs_on_memory_use_a_random_secret(t *testing.T) {
	t.Setenv("LOCKAPI_RELEASE_SECRETS", "")
	t.Setenv("LOCKAPI_REDIS_URL", "")
	a := serveInProcess(t)
	if !strings.Contains(a.Stderr.String(), "release URLs are signed with a random secret") {
		t.Errorf("startup does not say release URLs die with the process:\n%s", a.Stderr)
	}
	mustRelease(t, a, releaseURL(t, a, "mem"), "a release URL on the memory store")
}

// An instance that starts while Redis is down signs with a random secret,
// and takes the shared one once Redis answers.
func TestServe_release_secret_read_once_Redis_answers(t *testing.T) {
	t.Setenv("LOCKAPI_RELEASE_SECRETS", "")
	rs := redistest.Start(t)
	if !rs.CanRestart() {
		t.Skip("needs a Redis this test can stop")
	}
	defer func(d time.Duration) { secretRetry = d }(secretRetry)
	secretRetry = 20 * time.Millisecond
	args := []string{"--redis-url", rs.URL, "--key-prefix", "servetest:"}

	rs.Stop(t)
	a := serveInProcess(t, args...)
	if !strings.Contains(a.Stderr.String(), "signing with a random one until Redis answers") {
		t.Fatalf("no warning while Redis is down:\n%s", a.Stderr)
	}
	rs.Resume(t)
	mustSee(t, a.Stderr.Seen("release URLs are signed with the secret kept in Redis"), "the shared secret taken", a.Run)

	b := serveInProcess(t, args...)
	mustRelease(t, b, releaseURL(t, a, "late"), "A's release URL on B")
}

// --max-ttl may not exceed the server's ceiling, the ttl_ms maximum of
// openapi.yaml: a larger one stops the server at startup, naming what was
// set.
func TestServe_max_TTL_above_ceiling_is_fatal(t *testing.T) {
	clearEnvironment(t)
	for _, tc := range []struct{ name, env, want string }{
		{"flag", "", `--max-ttl="721h"`},
		{"environment", "LOCKAPI_MAX_TTL", `LOCKAPI_MAX_TTL="721h"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := []string{"serve", "--addr", "127.0.0.1:0"}
			if tc.env != "" {
				t.Setenv(tc.env, "721h")
			} else {
				args = append(args, "--max-ttl", "721h")
			}
			r := lockapi(t, args...)
			if r.Code != exitUsage || !strings.Contains(r.Stderr, tc.want) || !strings.Contains(r.Stderr, "720h") || strings.Contains(r.Stderr, "listening") {
				t.Fatalf("exit %d, want %d naming %s and the ceiling\nstderr: %s", r.Code, exitUsage, tc.want, r.Stderr)
			}
		})
	}
	t.Run("OK_at_the_ceiling", func(t *testing.T) {
		serveInProcess(t, "--max-ttl", "720h")
	})
}
