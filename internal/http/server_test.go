package http_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/lockapi/lockapi"
	lockhttp "github.com/lockapi/lockapi/internal/http"
	"github.com/lockapi/lockapi/internal/lock"
	"github.com/lockapi/lockapi/internal/store/memory"
)

func TestOps(t *testing.T) {
	e := MustOpenEnv(t, lockhttp.Config{})

	t.Run("Healthz200", func(t *testing.T) {
		e := e.For(t)
		if s := Decode[lockhttp.Status](t, e.Do("GET", "/healthz", "")); s.Status != "ok" {
			t.Fatalf("status = %+v", s)
		}
	})

	t.Run("Readyz200", func(t *testing.T) {
		e := e.For(t)
		if s := Decode[lockhttp.Status](t, e.Do("GET", "/readyz", "")); s.Status != "ready" {
			t.Fatalf("status = %+v", s)
		}
	})

	t.Run("OpenAPI200", func(t *testing.T) {
		e := e.For(t)
		resp := e.Do("GET", "/openapi.yaml", "")
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/yaml" {
			t.Fatalf("status %d, Content-Type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		if !bytes.Equal(resp.Body, lockapi.OpenAPI) {
			t.Fatal("body is not the embedded openapi.yaml")
		}
	})

	t.Run("OpenAPIJSON200", func(t *testing.T) {
		e := e.For(t)
		resp := e.Do("GET", "/openapi.json", "")
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" {
			t.Fatalf("status %d, Content-Type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		if !bytes.Equal(resp.Body, lockapi.OpenAPIJSON()) {
			t.Fatal("body is not openapi.yaml as JSON")
		}
	})
}

func TestReadyz_StoreDown503(t *testing.T) {
	e := MustOpenHookedEnv(t, lockhttp.Config{})
	e.Hooks.OnPing = func(ctx context.Context) error { return errors.New("dial tcp 10.0.0.1:6379: connection refused") }
	resp := e.Do("GET", "/readyz", "")
	p := WantProblem(t, resp, http.StatusServiceUnavailable, "unavailable")
	if resp.Header.Get("Retry-After") != "1" {
		t.Errorf("Retry-After = %q", resp.Header.Get("Retry-After"))
	}
	if strings.Contains(string(resp.Body), "10.0.0.1") {
		t.Errorf("cause leaked: %s", resp.Body)
	}
	if p.Detail == "" {
		t.Error("no detail")
	}
}

func TestErrors_StoreFailures(t *testing.T) {
	e := MustOpenHookedEnv(t, lockhttp.Config{})
	const secret = "redis: password=hunter2 at 10.0.0.1"

	t.Run("ForeignError500", func(t *testing.T) {
		e := e.For(t)
		e.Hooks.OnInspect = func(context.Context, string) (lock.State, error) { return lock.State{}, errors.New(secret) }
		resp := e.Do("GET", "/v1/locks/x", "")
		p := WantProblem(t, resp, http.StatusInternalServerError, "internal")
		if p.Detail != "internal error" || strings.Contains(string(resp.Body), "hunter2") {
			t.Fatalf("leaked: %s", resp.Body)
		}
		if !strings.Contains(e.Logs.String(), "hunter2") {
			t.Error("the cause was not logged")
		}
	})

	t.Run("Unavailable503", func(t *testing.T) {
		e := e.For(t)
		e.Hooks.OnInspect = func(context.Context, string) (lock.State, error) {
			return lock.State{}, lock.Unavailable(errors.New(secret))
		}
		resp := e.Do("GET", "/v1/locks/x", "")
		WantProblem(t, resp, http.StatusServiceUnavailable, "unavailable")
		if resp.Header.Get("Retry-After") != "1" || strings.Contains(string(resp.Body), "hunter2") {
			t.Fatalf("Retry-After %q, body %s", resp.Header.Get("Retry-After"), resp.Body)
		}
	})

	t.Run("Panic500", func(t *testing.T) {
		e := e.For(t)
		e.Hooks.OnInspect = func(context.Context, string) (lock.State, error) { panic(secret) }
		resp := e.Do("GET", "/v1/locks/x", "")
		p := WantProblem(t, resp, http.StatusInternalServerError, "internal")
		if p.Detail != "internal error" || strings.Contains(string(resp.Body), "hunter2") || strings.Contains(string(resp.Body), "goroutine") {
			t.Fatalf("leaked: %s", resp.Body)
		}
		var logged bool
		for _, line := range e.Logs.Lines(t) {
			if s, _ := line["stack"].(string); strings.Contains(s, "goroutine") && strings.Contains(line["error"].(string), "hunter2") {
				logged = true
			}
		}
		if !logged {
			t.Error("panic value and stack not logged")
		}
		// The server survives.
		e.Hooks.OnInspect = nil
		if resp := e.Do("GET", "/v1/locks/x", ""); resp.StatusCode != http.StatusOK {
			t.Fatalf("after panic: %d", resp.StatusCode)
		}
	})
}

func TestRequestID(t *testing.T) {
	e := MustOpenEnv(t, lockhttp.Config{})
	for _, tc := range []struct {
		name, sent string
		honoured   bool
	}{
		{"ClientIDHonoured", "trace-abc.123:xyz", true},
		{"MaxLengthHonoured", strings.Repeat("a", 128), true},
		{"TooLongReplaced", strings.Repeat("a", 129), false},
		{"SpaceReplaced", "a b", false},
		{"NonASCIIReplaced", "été", false},
		{"TabReplaced", "a\tb", false},
		{"AbsentGenerated", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := e.For(t)
			for _, path := range []string{"/healthz", "/nope"} {
				var hdr []string
				if tc.sent != "" {
					hdr = []string{"X-Request-ID", tc.sent}
				}
				got := e.Do("GET", path, "", hdr...).Header.Get("X-Request-ID")
				if tc.honoured && got != tc.sent {
					t.Errorf("%s: X-Request-ID = %q, want %q", path, got, tc.sent)
				}
				if !tc.honoured && (got == tc.sent || len(got) != 26) {
					t.Errorf("%s: X-Request-ID = %q, want a fresh ULID", path, got)
				}
			}
		})
	}
}

func TestAccessLog(t *testing.T) {
	e := MustOpenEnv(t, lockhttp.Config{})
	resp := e.Do("GET", "/v1/locks/logged", "", "X-Request-ID", "log-me")
	var found []map[string]any
	for _, line := range e.Logs.Lines(t) {
		if line["message"] == "request" && line["request_id"] == "log-me" {
			found = append(found, line)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d access-log lines for the request, want 1: %v", len(found), found)
	}
	line := found[0]
	if line["method"] != "GET" || line["route"] != "/v1/locks/{name}" || line["status"] != float64(200) ||
		line["bytes"] != float64(len(resp.Body)) || line["remote"] == "" {
		t.Errorf("line = %v", line)
	}
	if _, ok := line["duration_ms"].(float64); !ok {
		t.Errorf("duration_ms = %v", line["duration_ms"])
	}
}

// A client chooses the method, and net/http takes any token up to its
// header limit: the access log keeps a bounded prefix of it.
func TestAccessLog_LongMethodClipped(t *testing.T) {
	e := MustOpenEnv(t, lockhttp.Config{})
	method := strings.Repeat("X", 30<<10)
	e.Do(method, "/v1/locks/logged", "", "X-Request-ID", "long-method")
	for _, line := range e.Logs.Lines(t) {
		if line["message"] != "request" || line["request_id"] != "long-method" {
			continue
		}
		if m, _ := line["method"].(string); len(m) > 32 || !strings.HasPrefix(m, "XXXX") {
			t.Errorf("logged method of %d bytes: %.40q", len(m), m)
		}
		return
	}
	t.Fatal("no access-log line for the request")
}

func TestClose(t *testing.T) {
	t.Run("WaitingAcquire503Promptly", func(t *testing.T) {
		e := MustOpenHookedEnv(t, lockhttp.Config{})
		e.Acquire("q", `{"owner":"a","ttl_ms":600000}`)
		done := make(chan Response, 1)
		go func() {
			resp, err := e.send(context.Background(), "POST", "/v1/locks/q/leases", `{"owner":"b","wait_ms":60000}`)
			if err != nil {
				t.Error(err)
			}
			done <- resp
		}()
		Within(t, e.Hooks.Watching, "waiter registered")

		closed := make(chan error, 1)
		start := time.Now()
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), promptly)
			defer cancel()
			closed <- e.Server.Close(ctx)
		}()
		resp := Within(t, done, "waiter answered")
		p := WantProblem(t, resp, http.StatusServiceUnavailable, "unavailable")
		if p.Detail != "server is shutting down" || resp.Header.Get("Retry-After") != "1" {
			t.Errorf("detail %q, Retry-After %q", p.Detail, resp.Header.Get("Retry-After"))
		}
		if err := Within(t, closed, "Close returned"); err != nil {
			t.Fatalf("close: %v", err)
		}
		if d := time.Since(start); d > promptly {
			t.Errorf("shutdown took %v", d)
		}
		if st := e.State("q"); st.Holder.Owner != "a" {
			t.Errorf("holder = %q after shutdown", st.Holder.Owner)
		}
	})

	t.Run("BlockingQuery503Promptly", func(t *testing.T) {
		e := MustOpenHookedEnv(t, lockhttp.Config{})
		index := Decode[lockhttp.LockState](t, e.Do("GET", "/v1/locks/w", "")).Index
		done := make(chan Response, 1)
		go func() {
			resp, err := e.send(context.Background(), "GET", "/v1/locks/w?wait_ms=60000&index="+index, "")
			if err != nil {
				t.Error(err)
			}
			done <- resp
		}()
		Within(t, e.Hooks.Watching, "watcher registered")
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), promptly)
			defer cancel()
			_ = e.Server.Close(ctx)
		}()
		WantProblem(t, Within(t, done, "query answered"), http.StatusServiceUnavailable, "unavailable")
	})

	t.Run("InFlightRequestFinishes", func(t *testing.T) {
		e := MustOpenHookedEnv(t, lockhttp.Config{})
		entered, proceed := make(chan struct{}), make(chan struct{})
		e.Hooks.OnInspect = func(ctx context.Context, name string) (lock.State, error) {
			close(entered)
			<-proceed
			return e.Mem.Inspect(ctx, name)
		}
		done := make(chan Response, 1)
		go func() {
			resp, err := e.send(context.Background(), "GET", "/v1/locks/slow", "")
			if err != nil {
				t.Error(err)
			}
			done <- resp
		}()
		Within(t, entered, "request in flight")
		closed := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), promptly)
			defer cancel()
			closed <- e.Server.Close(ctx)
		}()
		// Let the request finish only once shutdown has closed the listener.
		host := strings.TrimPrefix(e.URL, "http://")
		for deadline := time.Now().Add(promptly); ; time.Sleep(5 * time.Millisecond) {
			conn, err := net.Dial("tcp", host)
			if err != nil {
				break
			}
			conn.Close()
			if time.Now().After(deadline) {
				t.Fatal("listener still open")
			}
		}
		close(proceed)
		if resp := Within(t, done, "request answered"); resp.StatusCode != http.StatusOK {
			t.Fatalf("status = %d", resp.StatusCode)
		}
		if err := Within(t, closed, "Close returned"); err != nil {
			t.Fatal(err)
		}
	})
}

func TestURL_Port0(t *testing.T) {
	srv := lockhttp.NewServer(nil, withRelease(lockhttp.Config{}))
	if err := srv.Open(":0"); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = srv.Close(context.Background()) }()
	if u := srv.URL(); !strings.HasPrefix(u, "http://127.0.0.1:") || strings.HasSuffix(u, ":0") {
		t.Fatalf("URL = %q", u)
	}
	resp, err := http.Get(srv.URL() + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
}

// A connection that never sent a request (a client's spare, dialled and
// pooled unused) does not hold Close up: net/http's Shutdown would count it
// busy until it is 5 s old. This was the flaky "close server: context
// deadline exceeded" of the client tests.
func TestClose_UnusedConnectionDoesNotHoldShutdown(t *testing.T) {
	mem := memory.New()
	t.Cleanup(func() { _ = mem.Close() })
	srv := lockhttp.NewServer(mem, withRelease(lockhttp.Config{}))
	if err := srv.Open("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	addr := strings.TrimPrefix(srv.URL(), "http://")
	spare, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer spare.Close()
	// The server accepts in order and registers each connection before it
	// accepts the next: once a later connection is answered, the spare one
	// is registered as new.
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Get(srv.URL() + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := srv.Close(ctx); err != nil {
		t.Fatalf("close with an unused connection open: %v", err)
	}
	// The spare connection was closed by the server, not left to its peer.
	_ = spare.SetReadDeadline(time.Now().Add(promptly))
	if _, err := spare.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("read on the unused connection after Close: %v, want it closed", err)
	}
}
