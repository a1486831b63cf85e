package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/lockapi/lockapi/client"
	"github.com/lockapi/lockapi/internal/auth"
	lockhttp "github.com/lockapi/lockapi/internal/http"
	"github.com/lockapi/lockapi/internal/store/memory"
)

// promptly bounds what should happen "at once": generous, so that a loaded
// CI machine does not flake, yet far below the waits under test.
const promptly = 10 * time.Second

// startServer runs a lockapi server on the memory store on a loopback port
// and returns its URL.
func startServer(t *testing.T, cfg lockhttp.Config) string {
	t.Helper()
	mem := memory.New()
	t.Cleanup(func() { _ = mem.Close() })
	cfg.Logger = zerolog.Nop()
	cfg.Release, _ = auth.NewReleaseSigner(auth.RandomSecret())
	srv := lockhttp.NewServer(mem, cfg)
	if err := srv.Open("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), promptly)
		defer cancel()
		_ = srv.Close(ctx)
	})
	return srv.URL()
}

// newTestClient returns an SDK client of url.
func newTestClient(t *testing.T, url string) *client.Client {
	t.Helper()
	c, err := client.New(url)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// hold acquires name as owner for the rest of the test.
func hold(t *testing.T, url, name, owner string) *client.Lease {
	t.Helper()
	l, err := newTestClient(t, url).Acquire(context.Background(), name, client.AcquireOptions{Owner: owner, TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Release(context.Background()) })
	return l
}

// syncBuffer is a bytes.Buffer safe for concurrent use that can tell when
// a text has been written.
type syncBuffer struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	watches []watch
}

type watch struct {
	text string
	ch   chan struct{}
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n, err := b.buf.Write(p)
	kept := b.watches[:0]
	for _, w := range b.watches {
		if strings.Contains(b.buf.String(), w.text) {
			close(w.ch)
		} else {
			kept = append(kept, w)
		}
	}
	b.watches = kept
	return n, err
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Seen returns a channel that is closed once text has been written.
func (b *syncBuffer) Seen(text string) <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	ch := make(chan struct{})
	if strings.Contains(b.buf.String(), text) {
		close(ch)
	} else {
		b.watches = append(b.watches, watch{text, ch})
	}
	return ch
}

// Result is a finished lockapi invocation.
type Result struct {
	Code           int
	Stdout, Stderr string
}

// Run is a lockapi invocation in progress.
type Run struct {
	Stdout, Stderr *syncBuffer
	done           chan Result
}

// start runs `lockapi args...` in-process.
func start(ctx context.Context, args ...string) *Run {
	r := &Run{Stdout: &syncBuffer{}, Stderr: &syncBuffer{}, done: make(chan Result, 1)}
	go func() {
		code := run(ctx, args, r.Stdout, r.Stderr)
		r.done <- Result{code, r.Stdout.String(), r.Stderr.String()}
	}()
	return r
}

// Wait waits for the run to end, for at most d.
func (r *Run) Wait(t *testing.T, d time.Duration) Result {
	t.Helper()
	select {
	case res := <-r.done:
		return res
	case <-time.After(d):
		t.Fatalf("lockapi did not exit within %v\nstdout: %s\nstderr: %s", d, r.Stdout, r.Stderr)
		return Result{}
	}
}

// lockapi runs `lockapi args...` in-process to the end.
func lockapi(t *testing.T, args ...string) Result {
	t.Helper()
	return start(context.Background(), args...).Wait(t, promptly+time.Minute)
}

// mustSee waits until ch is closed.
func mustSee(t *testing.T, ch <-chan struct{}, what string, r *Run) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(promptly):
		t.Fatalf("timed out waiting for %s\nstdout: %s\nstderr: %s", what, r.Stdout, r.Stderr)
	}
}

func heldBy(t *testing.T, url, name string) string {
	t.Helper()
	st, err := newTestClient(t, url).Inspect(context.Background(), name)
	if err != nil {
		t.Fatalf("get lock: %v", err)
	}
	if st.Held {
		return st.Holder.Owner
	}
	return ""
}

// Concurrent runs of the same lock take turns: the intervals in which their
// commands run never overlap, and their fencing tokens rise in that order.
func TestRun_MutualExclusion(t *testing.T) {
	url := startServer(t, lockhttp.Config{})
	log := filepath.Join(t.TempDir(), "log")
	script := `echo "start $(date +%s%N) $LOCKAPI_FENCING_TOKEN" >> "$LOG"; sleep 0.3; echo "end $(date +%s%N) $LOCKAPI_FENCING_TOKEN" >> "$LOG"`
	t.Setenv("LOG", log)

	const runs = 4
	var wg sync.WaitGroup
	results := make([]Result, runs)
	for i := range runs {
		wg.Go(func() {
			results[i] = lockapi(t, "run", "--server", url, "--ttl", "1s", "--wait", "30s", "deploy:prod", "--", "sh", "-c", script)
		})
	}
	wg.Wait()
	for i, r := range results {
		if r.Code != 0 {
			t.Errorf("run %d: exit %d\nstderr: %s", i, r.Code, r.Stderr)
		}
	}

	data, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	type event struct {
		kind  string
		at    int64
		token uint64
	}
	var events []event
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		var e event
		if _, err := fmt.Sscan(sc.Text(), &e.kind, &e.at, &e.token); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		events = append(events, e)
	}
	if len(events) != 2*runs {
		t.Fatalf("%d events, want %d:\n%s", len(events), 2*runs, data)
	}
	for i := 0; i < len(events); i += 2 {
		s, e := events[i], events[i+1]
		if s.kind != "start" || e.kind != "end" || s.token != e.token {
			t.Fatalf("runs overlap: event %d is %v, %d is %v:\n%s", i, s, i+1, e, data)
		}
		if i > 0 {
			prev := events[i-1]
			if s.at < prev.at {
				t.Errorf("a command started at %d, before the previous one ended at %d", s.at, prev.at)
			}
			if s.token <= prev.token {
				t.Errorf("token %d after %d", s.token, prev.token)
			}
		}
	}
	if h := heldBy(t, url, "deploy:prod"); h != "" {
		t.Errorf("after all runs the lock is held by %q", h)
	}
}

func TestRun_Environment(t *testing.T) {
	url := startServer(t, lockhttp.Config{})
	t.Setenv("PARENT_VAR", "inherited")
	r := lockapi(t, "run", "--server", url, "job:1", "--", "sh", "-c",
		`echo "$LOCKAPI_LOCK"; echo "$LOCKAPI_LEASE_ID"; echo "$LOCKAPI_FENCING_TOKEN"; echo "$PARENT_VAR"`)
	if r.Code != 0 {
		t.Fatalf("exit %d: %s", r.Code, r.Stderr)
	}
	lines := strings.Split(strings.TrimSpace(r.Stdout), "\n")
	if len(lines) != 4 {
		t.Fatalf("output %q", r.Stdout)
	}
	if lines[0] != "job:1" {
		t.Errorf("LOCKAPI_LOCK %q", lines[0])
	}
	if len(lines[1]) != 26 {
		t.Errorf("LOCKAPI_LEASE_ID %q is no ULID", lines[1])
	}
	if tok, err := strconv.ParseUint(lines[2], 10, 64); err != nil || tok == 0 {
		t.Errorf("LOCKAPI_FENCING_TOKEN %q", lines[2])
	}
	if lines[3] != "inherited" {
		t.Errorf("the parent's environment did not pass: PARENT_VAR=%q", lines[3])
	}
	if h := heldBy(t, url, "job:1"); h != "" {
		t.Errorf("after the run the lock is held by %q", h)
	}
}

// The lock is held while the command runs, by the owner given; cancelling
// run's context terminates the command, and the lock is released.
func TestRun_HoldsWhileRunning(t *testing.T) {
	url := startServer(t, lockhttp.Config{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := start(ctx, "run", "--server", url, "--owner", "nightly", "job", "--", "sh", "-c",
		`trap 'kill $! 2>/dev/null; exit 0' TERM; echo running; sleep 30 & wait`)
	mustSee(t, r.Stdout.Seen("running"), "the command to start", r)
	if h := heldBy(t, url, "job"); h != "nightly" {
		t.Errorf("while the command runs the lock is held by %q, want nightly", h)
	}
	cancel()
	if res := r.Wait(t, promptly); res.Code != 0 {
		t.Errorf("exit %d, want the command's 0\nstderr: %s", res.Code, res.Stderr)
	}
	if h := heldBy(t, url, "job"); h != "" {
		t.Errorf("after the run the lock is held by %q", h)
	}
}

func TestRun_ExitStatus(t *testing.T) {
	url := startServer(t, lockhttp.Config{})
	for _, tc := range []struct {
		name string
		cmd  []string
		want int
	}{
		{"OK", []string{"true"}, 0},
		{"Code3", []string{"sh", "-c", "exit 3"}, 3},
		{"KilledBySignal", []string{"sh", "-c", "kill -KILL $$"}, 128 + 9},
		{"NotFound", []string{"no-such-command-lockapi-test"}, exitNotFound},
		{"NotExecutable", []string{os.DevNull}, exitCannotExec},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := lockapi(t, append([]string{"run", "--server", url, "job", "--"}, tc.cmd...)...)
			if r.Code != tc.want {
				t.Errorf("exit %d, want %d\nstderr: %s", r.Code, tc.want, r.Stderr)
			}
			if h := heldBy(t, url, "job"); h != "" {
				t.Errorf("after the run the lock is held by %q", h)
			}
		})
	}
}

// A force release makes the command get SIGTERM, and lockapi run exit 70:
// at once (the lease's loss watch), not at the next renewal, 10 s away
// with a 30 s TTL. The target is 250 ms; the bound asserted, 2 s, leaves a
// loaded machine room and still proves the watch.
func TestRun_LeaseLostTerminatesCommand(t *testing.T) {
	url := startServer(t, lockhttp.Config{})
	marker := filepath.Join(t.TempDir(), "term")
	t.Setenv("MARKER", marker)
	r := start(context.Background(), "run", "--server", url, "--ttl", "30s", "job", "--", "sh", "-c",
		`trap 'echo got-term > "$MARKER"; echo got-term; kill $! 2>/dev/null; exit 0' TERM; echo started; sleep 30 & wait`)
	mustSee(t, r.Stdout.Seen("started"), "the command to start", r)

	forced := time.Now()
	if released, err := newTestClient(t, url).ForceRelease(context.Background(), "job"); err != nil || !released {
		t.Fatalf("force release: released %v, %v", released, err)
	}
	mustSee(t, r.Stdout.Seen("got-term"), "the command to get SIGTERM", r)
	told := time.Since(forced)
	t.Logf("force release to SIGTERM: %v (target 250ms)", told)
	if told > 2*time.Second {
		t.Errorf("the command got SIGTERM %v after the force release, want within 2s (target 250ms)", told)
	}
	res := r.Wait(t, promptly)
	if res.Code != exitLeaseLost {
		t.Errorf("exit %d, want %d\nstderr: %s", res.Code, exitLeaseLost, res.Stderr)
	}
	if got, _ := os.ReadFile(marker); strings.TrimSpace(string(got)) != "got-term" {
		t.Errorf("the command did not get SIGTERM (marker %q)", got)
	}
	if !strings.Contains(res.Stderr, `lease lost: lock "job"`) || !strings.Contains(res.Stderr, "SIGTERM") {
		t.Errorf("stderr does not explain: %s", res.Stderr)
	}
}

// A command that ignores SIGTERM gets SIGKILL after --grace.
func TestRun_LeaseLostKillsAfterGrace(t *testing.T) {
	url := startServer(t, lockhttp.Config{})
	r := start(context.Background(), "run", "--server", url, "--ttl", "1s", "--grace", "300ms", "job", "--", "sh", "-c",
		`trap '' TERM; echo started; exec sleep 30`)
	mustSee(t, r.Stdout.Seen("started"), "the command to start", r)
	if _, err := newTestClient(t, url).ForceRelease(context.Background(), "job"); err != nil {
		t.Fatal(err)
	}
	res := r.Wait(t, time.Second+promptly)
	if res.Code != exitLeaseLost || !strings.Contains(res.Stderr, "SIGKILL") {
		t.Errorf("exit %d, want %d after SIGKILL\nstderr: %s", res.Code, exitLeaseLost, res.Stderr)
	}
}

func TestRun_WaitTimeout(t *testing.T) {
	url := startServer(t, lockhttp.Config{MaxWait: 100 * time.Millisecond})
	hold(t, url, "job", "holder-x")
	for _, wait := range []string{"0", "400ms"} {
		t.Run("Wait"+wait, func(t *testing.T) {
			began := time.Now()
			r := lockapi(t, "run", "--server", url, "--wait", wait, "job", "--", "true")
			if r.Code != exitTempFail {
				t.Errorf("exit %d, want %d\nstderr: %s", r.Code, exitTempFail, r.Stderr)
			}
			if !strings.Contains(r.Stderr, `held by "holder-x"`) {
				t.Errorf("stderr does not name the holder: %s", r.Stderr)
			}
			if d, _ := time.ParseDuration(wait); time.Since(began) < d {
				t.Errorf("gave up after %v, before --wait %s", time.Since(began), wait)
			}
		})
	}
}

// A wait longer than the server's maximum wait takes several long polls.
func TestRun_WaitsBeyondServerMaxWait(t *testing.T) {
	url := startServer(t, lockhttp.Config{MaxWait: 100 * time.Millisecond})
	holder := hold(t, url, "job", "holder-x")
	r := start(context.Background(), "run", "--server", url, "--wait", "30s", "job", "--", "echo", "ran")
	mustSee(t, r.Stderr.Seen(`held by "holder-x"; waiting`), "the waiting message", r)
	time.Sleep(300 * time.Millisecond) // a few of the server's maximum waits
	if err := holder.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	res := r.Wait(t, promptly)
	if res.Code != 0 || res.Stdout != "ran\n" {
		t.Errorf("exit %d, stdout %q\nstderr: %s", res.Code, res.Stdout, res.Stderr)
	}
}

func TestRun_ServerUnavailable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String()
	_ = ln.Close()
	r := lockapi(t, "run", "--server", url, "job", "--", "true")
	if r.Code != exitUnavailable || !strings.Contains(r.Stderr, "unavailable") {
		t.Errorf("exit %d, want %d\nstderr: %s", r.Code, exitUnavailable, r.Stderr)
	}
}

// The server is $LOCKAPI_URL, as the SDKs read it; LOCKAPI_SERVER, its
// older name, still works, with a warning.
func TestRun_ServerFromEnvironment(t *testing.T) {
	url := startServer(t, lockhttp.Config{})
	t.Setenv("LOCKAPI_URL", url)
	t.Setenv("LOCKAPI_SERVER", "http://127.0.0.1:1")
	if r := lockapi(t, "run", "job", "true"); r.Code != 0 || strings.Contains(r.Stderr, "deprecated") {
		t.Errorf("LOCKAPI_URL: exit %d: %s", r.Code, r.Stderr)
	}
	t.Setenv("LOCKAPI_URL", "")
	t.Setenv("LOCKAPI_SERVER", url)
	if r := lockapi(t, "run", "job", "true"); r.Code != 0 || strings.Count(r.Stderr, "LOCKAPI_SERVER is deprecated") != 1 {
		t.Errorf("LOCKAPI_SERVER: exit %d, want 0 and one warning: %s", r.Code, r.Stderr)
	}
}

func TestRun_Usage(t *testing.T) {
	url := startServer(t, lockhttp.Config{})
	for _, args := range [][]string{
		{"run"},
		{"run", "--server", url, "job"},
		{"run", "--server", url, "job", "--"},
		{"run", "--no-such-flag", "job", "--", "true"},
		{"run", "--ttl", "-1s", "job", "--", "true"},
		{"run", "--server", "localhost:8080", "job", "--", "true"},
		{"run", "--server", url, "bad name", "--", "true"}, // refused by the server
	} {
		r := lockapi(t, args...)
		if r.Code != exitUsage || r.Stderr == "" {
			t.Errorf("lockapi %q: exit %d, want %d, with a message\nstderr: %s", args, r.Code, exitUsage, r.Stderr)
		}
	}
	if r := lockapi(t, "run", "-h"); r.Code != 0 || !strings.Contains(r.Stdout, "Exit status") {
		t.Errorf("run -h: exit %d, stdout %q", r.Code, r.Stdout)
	}
	// Flags may also follow NAME.
	if r := lockapi(t, "run", "job", "--server", url, "--ttl", "5s", "--", "true"); r.Code != 0 {
		t.Errorf("flags after NAME: exit %d: %s", r.Code, r.Stderr)
	}
}

// SIGINT and SIGTERM sent to lockapi run reach the command.
func TestRun_ForwardsSignals(t *testing.T) {
	// Catch the signals in this test too, so that one that arrives when
	// lockapi run is not listening cannot kill the test binary.
	safety := make(chan os.Signal, 8)
	signal.Notify(safety, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(safety)

	// As when stdin is no terminal: a test run from one must not differ.
	fromTerminal := signalFromTerminal
	signalFromTerminal = func() bool { return false }
	defer func() { signalFromTerminal = fromTerminal }()

	url := startServer(t, lockhttp.Config{})
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		t.Run(sig.String(), func(t *testing.T) {
			marker := filepath.Join(t.TempDir(), "got")
			t.Setenv("MARKER", marker)
			r := start(context.Background(), "run", "--server", url, "job", "--", "sh", "-c",
				`trap 'echo got-int > "$MARKER"; kill $! 2>/dev/null; exit 5' INT; trap 'echo got-term > "$MARKER"; kill $! 2>/dev/null; exit 6' TERM; echo started; sleep 30 & wait`)
			mustSee(t, r.Stdout.Seen("started"), "the command to start", r)
			if err := syscall.Kill(os.Getpid(), sig); err != nil {
				t.Fatal(err)
			}
			res := r.Wait(t, promptly)
			want, wantMarker := 5, "got-int"
			if sig == syscall.SIGTERM {
				want, wantMarker = 6, "got-term"
			}
			if res.Code != want {
				t.Errorf("exit %d, want the command's %d\nstderr: %s", res.Code, want, res.Stderr)
			}
			if got, _ := os.ReadFile(marker); strings.TrimSpace(string(got)) != wantMarker {
				t.Errorf("marker %q, want %q", got, wantMarker)
			}
			if h := heldBy(t, url, "job"); h != "" {
				t.Errorf("after the run the lock is held by %q", h)
			}
		})
	}
}

// Cancelling run's context while it waits for the lock ends it promptly.
func TestRun_CancelledWhileWaiting(t *testing.T) {
	url := startServer(t, lockhttp.Config{})
	hold(t, url, "job", "holder-x")
	ctx, cancel := context.WithCancel(context.Background())
	r := start(ctx, "run", "--server", url, "--wait", "1m", "job", "--", "true")
	mustSee(t, r.Stderr.Seen("waiting"), "the waiting message", r)
	cancel()
	res := r.Wait(t, promptly)
	if res.Code != 128+int(syscall.SIGINT) {
		t.Errorf("exit %d, want %d\nstderr: %s", res.Code, 128+int(syscall.SIGINT), res.Stderr)
	}
}

func TestStatus(t *testing.T) {
	url := startServer(t, lockhttp.Config{})

	t.Run("NeverAcquired", func(t *testing.T) {
		r := lockapi(t, "status", "--server", url, "job")
		if r.Code != 0 || !strings.Contains(r.Stdout, "state:") || !strings.Contains(r.Stdout, "free") || !strings.Contains(r.Stdout, "never acquired") {
			t.Errorf("exit %d, stdout:\n%s\nstderr: %s", r.Code, r.Stdout, r.Stderr)
		}
	})

	l := hold(t, url, "job", "worker-7")
	t.Run("Held", func(t *testing.T) {
		r := lockapi(t, "status", "--server", url, "job")
		for _, want := range []string{"lock:", "job", "held", "worker-7", strconv.FormatUint(l.Token(), 10), "expires", "unless renewed"} {
			if !strings.Contains(r.Stdout, want) {
				t.Errorf("stdout lacks %q:\n%s", want, r.Stdout)
			}
		}
		if r.Code != 0 {
			t.Errorf("exit %d: %s", r.Code, r.Stderr)
		}
	})

	t.Run("JSON", func(t *testing.T) {
		r := lockapi(t, "status", "--server", url, "job", "--json") // flags may follow NAME
		if r.Code != 0 || !strings.Contains(r.Stdout, `"held":true`) || !strings.Contains(r.Stdout, `"owner":"worker-7"`) {
			t.Errorf("exit %d, stdout %s, stderr %s", r.Code, r.Stdout, r.Stderr)
		}
	})

	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Run("Released", func(t *testing.T) {
		r := lockapi(t, "status", "--server", url, "job")
		if r.Code != 0 || !strings.Contains(r.Stdout, "free") || !strings.Contains(r.Stdout, strconv.FormatUint(l.Token(), 10)) {
			t.Errorf("exit %d, stdout:\n%s", r.Code, r.Stdout)
		}
	})

	t.Run("Readers", func(t *testing.T) {
		cl := newTestClient(t, url)
		for _, owner := range []string{"reader-1", "reader-2"} {
			r, err := cl.Acquire(context.Background(), "rw", client.AcquireOptions{Owner: owner, TTL: time.Minute, Shared: true})
			if err != nil {
				t.Fatal(err)
			}
			defer r.Release(context.Background())
		}
		r := lockapi(t, "status", "--server", url, "rw")
		for _, want := range []string{"shared: 2 readers", "reader-1 (shared)", "reader-2 (shared)"} {
			if !strings.Contains(r.Stdout, want) {
				t.Errorf("stdout lacks %q:\n%s", want, r.Stdout)
			}
		}
	})

	t.Run("Semaphore", func(t *testing.T) {
		p, err := newTestClient(t, url).Acquire(context.Background(), "sem", client.AcquireOptions{Owner: "permit-1", TTL: time.Minute, Limit: 3})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Release(context.Background())
		r := lockapi(t, "status", "--server", url, "sem")
		for _, want := range []string{"semaphore: 1 of 3 permits held", "permit-1 (permit)"} {
			if !strings.Contains(r.Stdout, want) {
				t.Errorf("stdout lacks %q:\n%s", want, r.Stdout)
			}
		}
		if strings.Contains(r.Stdout, "exclusive") {
			t.Errorf("a permit is shown as exclusive:\n%s", r.Stdout)
		}
	})

	t.Run("BoundToASession", func(t *testing.T) {
		cl := newTestClient(t, url)
		sess, err := cl.NewSession(context.Background(), client.SessionOptions{TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		defer sess.Close(context.Background())
		if _, err := sess.Acquire(context.Background(), "bound", client.AcquireOptions{Owner: "worker-9"}); err != nil {
			t.Fatal(err)
		}
		r := lockapi(t, "status", "--server", url, "bound")
		if want := "session:"; !strings.Contains(r.Stdout, want) || !strings.Contains(r.Stdout, sess.ID()) {
			t.Errorf("stdout lacks the session %s:\n%s", sess.ID(), r.Stdout)
		}
	})

	t.Run("Usage", func(t *testing.T) {
		for _, args := range [][]string{{"status"}, {"status", "--server", url, "a", "b"}, {"status", "--server", url, "bad name"}} {
			if r := lockapi(t, args...); r.Code != exitUsage {
				t.Errorf("lockapi %q: exit %d, want %d", args, r.Code, exitUsage)
			}
		}
	})

	t.Run("Unavailable", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		down := "http://" + ln.Addr().String()
		_ = ln.Close()
		if r := lockapi(t, "status", "--server", down, "job"); r.Code != exitUnavailable {
			t.Errorf("exit %d, want %d", r.Code, exitUnavailable)
		}
	})
}

func TestRun_APIKey(t *testing.T) {
	key, line, err := auth.NewKey("ci", []auth.Scope{auth.ScopeRead, auth.ScopeWrite}, []string{"job"})
	if err != nil {
		t.Fatal(err)
	}
	keys, err := auth.ParseKeys(line)
	if err != nil {
		t.Fatal(err)
	}
	url := startServer(t, lockhttp.Config{Keys: keys})

	t.Setenv("LOCKAPI_API_KEY", "")
	if r := lockapi(t, "run", "--server", url, "job", "--", "true"); r.Code != exitNoPerm || !strings.Contains(r.Stderr, "401") {
		t.Errorf("no key: exit %d, want %d\nstderr: %s", r.Code, exitNoPerm, r.Stderr)
	}
	if r := lockapi(t, "status", "--server", url, "job"); r.Code != exitNoPerm {
		t.Errorf("status without a key: exit %d, want %d\nstderr: %s", r.Code, exitNoPerm, r.Stderr)
	}
	t.Setenv("LOCKAPI_API_KEY", key)
	if r := lockapi(t, "run", "--server", url, "job", "--", "true"); r.Code != 0 {
		t.Errorf("with the key: exit %d\nstderr: %s", r.Code, r.Stderr)
	}
	if r := lockapi(t, "status", "--server", url, "job"); r.Code != 0 || !strings.Contains(r.Stdout, "free") {
		t.Errorf("status with the key: exit %d\nstdout: %s\nstderr: %s", r.Code, r.Stdout, r.Stderr)
	}
	if r := lockapi(t, "run", "--server", url, "other", "--", "true"); r.Code != exitNoPerm || !strings.Contains(r.Stderr, "403") {
		t.Errorf("a lock outside the key's patterns: exit %d, want %d\nstderr: %s", r.Code, exitNoPerm, r.Stderr)
	}
}

// --shared runs alongside readers and not alongside a writer; --limit takes
// a semaphore's permit and must agree with the semaphore's limit.
func TestRun_lock_kinds(t *testing.T) {
	url := startServer(t, lockhttp.Config{})
	cl := newTestClient(t, url)
	ctx := context.Background()
	reader, err := cl.Acquire(ctx, "rw", client.AcquireOptions{Owner: "reader", TTL: time.Minute, Shared: true})
	if err != nil {
		t.Fatal(err)
	}
	if r := lockapi(t, "run", "--server", url, "--wait", "0", "--shared", "rw", "--", "true"); r.Code != 0 {
		t.Errorf("--shared beside a reader: exit %d\nstderr: %s", r.Code, r.Stderr)
	}
	if r := lockapi(t, "run", "--server", url, "--wait", "0", "rw", "--", "true"); r.Code != exitTempFail || !strings.Contains(r.Stderr, `held by "reader"`) {
		t.Errorf("a writer beside a reader: exit %d, want %d\nstderr: %s", r.Code, exitTempFail, r.Stderr)
	}
	_ = reader.Release(ctx)

	permit, err := cl.Acquire(ctx, "sem", client.AcquireOptions{Owner: "p", TTL: time.Minute, Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer permit.Release(ctx)
	if r := lockapi(t, "run", "--server", url, "--wait", "0", "--limit", "2", "sem", "--", "true"); r.Code != 0 {
		t.Errorf("the second of 2 permits: exit %d\nstderr: %s", r.Code, r.Stderr)
	}
	if r := lockapi(t, "run", "--server", url, "--wait", "5s", "--limit", "3", "sem", "--", "true"); r.Code != exitUsage || !strings.Contains(r.Stderr, "semaphore with 2 permits") {
		t.Errorf("another limit: exit %d, want %d at once\nstderr: %s", r.Code, exitUsage, r.Stderr)
	}
	for _, args := range [][]string{{"--limit", "0"}, {"--limit", "10001"}, {"--limit", "2", "--shared"}} {
		r := lockapi(t, append(append([]string{"run", "--server", url}, args...), "sem", "--", "true")...)
		if r.Code != exitUsage {
			t.Errorf("%v: exit %d, want %d\nstderr: %s", args, r.Code, exitUsage, r.Stderr)
		}
	}
	if r := lockapi(t, "run", "--server", url, "--wait", "1s", "--fair", "fq", "--", "true"); r.Code != 0 {
		t.Errorf("--fair on a free lock: exit %d\nstderr: %s", r.Code, r.Stderr)
	}
}

// closeForDelay makes a lease of name bound to a session with lock-delay
// delay, and force-releases it: name is then closed for the delay.
func closeForDelay(t *testing.T, url, name string, delay time.Duration) {
	t.Helper()
	c, ctx := newTestClient(t, url), context.Background()
	s, err := c.NewSession(ctx, client.SessionOptions{LockDelay: delay})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	if _, err := s.Acquire(ctx, name, client.AcquireOptions{}); err != nil {
		t.Fatal(err)
	}
	if freed, err := c.ForceRelease(ctx, name); err != nil || !freed {
		t.Fatalf("force release %s: %v, %v", name, freed, err)
	}
}

// A lock-delay is waited through like a held lock; one that outlasts
// --wait exits 75, as a held lock does; status shows it.
func TestRun_LockDelay(t *testing.T) {
	url := startServer(t, lockhttp.Config{MaxWait: 300 * time.Millisecond})
	const delay = time.Second
	closeForDelay(t, url, "short", delay)
	closed := time.Now()
	closeForDelay(t, url, "long", time.Minute)

	r := lockapi(t, "status", "--server", url, "long")
	if r.Code != 0 || !strings.Contains(r.Stdout, "free") || !strings.Contains(r.Stdout, "lock-delay:") {
		t.Errorf("status: exit %d, stdout:\n%s\nstderr: %s", r.Code, r.Stdout, r.Stderr)
	}
	r = lockapi(t, "status", "--server", url, "long", "--json")
	if r.Code != 0 || !strings.Contains(r.Stdout, `"lock_delay_remaining_ms":`) {
		t.Errorf("status --json: exit %d, stdout %s, stderr %s", r.Code, r.Stdout, r.Stderr)
	}

	r = lockapi(t, "run", "--server", url, "--wait", "10s", "short", "--", "echo", "ran")
	if r.Code != 0 || r.Stdout != "ran\n" || !strings.Contains(r.Stderr, "closed for a lock-delay") {
		t.Errorf("run through the lock-delay: exit %d, stdout %q\nstderr: %s", r.Code, r.Stdout, r.Stderr)
	}
	if ran := time.Since(closed); ran < delay-100*time.Millisecond {
		t.Errorf("ran %v after the force release, within its %v lock-delay", ran, delay)
	}

	for _, wait := range []string{"0", "500ms"} {
		r := lockapi(t, "run", "--server", url, "--wait", wait, "long", "--", "echo", "ran")
		if r.Code != exitTempFail || r.Stdout != "" || !strings.Contains(r.Stderr, "could not get lock \"long\" within --wait") || !strings.Contains(r.Stderr, "lock-delay") {
			t.Errorf("--wait %s through a longer lock-delay: exit %d, want %d, stdout %q\nstderr: %s", wait, r.Code, exitTempFail, r.Stdout, r.Stderr)
		}
	}
}
