package tests

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lockapi/lockapi/internal/auth"
)

// reloadWithin is how long a reload may take in these tests: the server
// polls every 2 s; the rest is slack for a loaded machine.
const reloadWithin = 10 * time.Second

// keyPair is an API key and its line.
type keyPair struct{ key, line string }

func newKeyPair(t *testing.T, principal string) keyPair {
	t.Helper()
	key, line, err := auth.NewKey(principal, []auth.Scope{auth.ScopeRead, auth.ScopeWrite}, []string{"*"})
	if err != nil {
		t.Fatal(err)
	}
	return keyPair{key, line}
}

// writeKeys writes the lines as the keys file.
func writeKeys(t *testing.T, path string, lines ...string) time.Time {
	t.Helper()
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return time.Now()
}

// keyStatus is the status of GET /v1/locks/probe with key.
func keyStatus(t *testing.T, s *server, key string) int {
	t.Helper()
	req, _ := http.NewRequest("GET", s.URL+"/v1/locks/probe", nil)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// works reports whether the server takes key: anything but 401.
func works(t *testing.T, s *server, key string) bool {
	t.Helper()
	return keyStatus(t, s, key) != http.StatusUnauthorized
}

// eventually polls cond until it holds, for at most reloadWithin, and
// returns how long it took.
func eventually(t *testing.T, what string, since time.Time, cond func() bool) time.Duration {
	t.Helper()
	for deadline := time.Now().Add(reloadWithin); ; {
		if cond() {
			d := time.Since(since)
			t.Logf("%s after %v", what, d.Round(time.Millisecond))
			return d
		}
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", reloadWithin, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// openKeyStream opens an event stream with req and returns a channel closed
// when the server ends it.
func openKeyStream(t *testing.T, req *http.Request) <-chan struct{} {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req = req.WithContext(ctx)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := noRedirects.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("event stream: %d", resp.StatusCode)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
	}()
	return done
}

func closedWithin(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	case <-time.After(reloadWithin):
		return false
	}
}

// The keys file is read again when it changes: a removed key is refused,
// its event streams close and its dashboard sessions end; a new key works;
// a file that does not read keeps the keys in force, logs one line with
// the line number and counts an error; the next good file is taken.
func TestKeysReload_file_changes(t *testing.T) {
	a, b, c, d := newKeyPair(t, "a"), newKeyPair(t, "b"), newKeyPair(t, "c"), newKeyPair(t, "d")
	path := filepath.Join(t.TempDir(), "keys")
	writeKeys(t, path, a.line, b.line)
	s := startServer(t, []string{"LOCKAPI_API_KEYS_FILE=" + path, "LOCKAPI_API_KEYS=", "LOCKAPI_REDIS_URL="})
	if !works(t, s, b.key) || works(t, s, c.key) {
		t.Fatal("the keys at start are not the file's")
	}
	apiReq, _ := http.NewRequest("GET", s.URL+"/v1/events", nil)
	apiReq.Header.Set("Authorization", "Bearer "+b.key)
	apiStream := openKeyStream(t, apiReq)
	cookie := uiSignIn(t, s, b.key)
	uiReq, _ := http.NewRequest("GET", s.URL+"/ui/events", nil)
	uiReq.AddCookie(cookie)
	uiStream := openKeyStream(t, uiReq)

	// Remove b.
	since := writeKeys(t, path, a.line)
	eventually(t, "the removed key refused", since, func() bool { return !works(t, s, b.key) })
	if !closedWithin(apiStream) || !closedWithin(uiStream) {
		t.Fatal("the removed key's event streams stay open")
	}
	if code, _ := uiPage(t, s, cookie, "/ui/"); code != 0 {
		t.Fatalf("the removed key's dashboard session: %d, want the sign-in page", code)
	}
	if !works(t, s, a.key) {
		t.Fatal("the key that stayed is refused")
	}

	// Add c.
	since = writeKeys(t, path, a.line, c.line)
	eventually(t, "the new key works", since, func() bool { return works(t, s, c.key) })

	// Break it at line 2: the keys in force stay.
	since = writeKeys(t, path, a.line, "principal=x scopes=locks:nothing patterns=* sha256="+strings.Repeat("0", 64), d.line)
	eventually(t, "the bad file logged", since, func() bool { return hasLine(s.Logs(), "API keys file not reloaded") })
	if n := strings.Count(s.Logs(), "API keys file not reloaded"); n != 1 || !strings.Contains(s.Logs(), `"line":2`) {
		t.Fatalf("%d lines about the bad file, want one naming line 2:\n%s", n, s.Logs())
	}
	if !works(t, s, a.key) || !works(t, s, c.key) || works(t, s, d.key) {
		t.Fatal("a bad file changed the keys in force")
	}
	if m := metricsText(t, s); !strings.Contains(m, "lockapi_keys_reload_errors_total 1\n") {
		t.Fatalf("lockapi_keys_reload_errors_total is not 1:\n%s", m)
	}

	// Repair it: taken.
	since = writeKeys(t, path, a.line, c.line, d.line)
	eventually(t, "the repaired file taken", since, func() bool { return works(t, s, d.key) })
	logs := s.Logs()
	if !strings.Contains(logs, `"added":1,"removed":0`) || !strings.Contains(logs, `"added":0,"removed":1`) {
		t.Errorf("the reloads do not log what they added and removed:\n%s", logs)
	}
	for _, k := range []keyPair{a, b, c, d} {
		if strings.Contains(logs, k.key) || strings.Contains(logs, strings.TrimPrefix(k.key, "lka_")) {
			t.Fatalf("a key is in the logs:\n%s", logs)
		}
	}
}

// SIGHUP reads the file again at once, even a change the poll cannot see
// (the same size and modification time, in place).
func TestKeysReload_SIGHUP(t *testing.T) {
	a, b := newKeyPair(t, "a"), newKeyPair(t, "b")
	path := filepath.Join(t.TempDir(), "keys")
	writeKeys(t, path, a.line)
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	s := startServer(t, []string{"LOCKAPI_API_KEYS_FILE=" + path, "LOCKAPI_API_KEYS=", "LOCKAPI_REDIS_URL="})
	writeKeys(t, path, b.line) // the same length: principals of one letter
	if err := os.Chtimes(path, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	err = s.cmd.Process.Signal(syscall.SIGHUP)
	s.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	since := time.Now()
	eventually(t, "the key SIGHUP read works", since, func() bool { return works(t, s, b.key) })
	if works(t, s, a.key) {
		t.Fatal("the key SIGHUP removed still works")
	}
	if !strings.Contains(s.Logs(), `"trigger":"SIGHUP"`) {
		t.Fatalf("no reload line says SIGHUP:\n%s", s.Logs())
	}
}

// metricsText is GET /metrics of s.
func metricsText(t *testing.T, s *server) string {
	t.Helper()
	resp, err := http.Get(s.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}
