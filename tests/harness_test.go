// Package tests holds lockapi's end-to-end tests: they build the real binary,
// start it against a real redis-server, and drive it over HTTP with a client
// that validates every response against openapi.yaml.
package tests

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lockapi/lockapi/internal/testkit/apitest"
)

// binary is the lockapi executable built once for the whole package.
var binary string

// serverRace says that binary was built with the race detector: only with
// LOCKAPI_TEST_E2E_RACE=1. By default it is built as an operator runs it
// (go build -trimpath, no race detector): these tests measure the
// binary's timing under faults, which a race-built server distorts
// several times over, and its races are hunted by the packages' own
// tests, which run the same code in-process under -race (the stores on
// the same topologies). A race-built server also took a fifth of the
// suite's CPU time.
var serverRace = os.Getenv("LOCKAPI_TEST_E2E_RACE") == "1"

func TestMain(m *testing.M) {
	if url := os.Getenv(sessionHolderEnv); url != "" {
		// This process is a client the test kills, not the test.
		os.Exit(holdSession(url))
	}
	dir, err := os.MkdirTemp("", "lockapi-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "lockapi")
	// -trimpath as tests/upgrade builds today's binary: one build of the
	// packages serves both.
	args := []string{"build", "-trimpath", "-o", binary}
	if serverRace {
		args = append(args, "-race")
	}
	build := exec.Command("go", append(args, "../cmd/lockapi")...)
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building lockapi:", err)
		os.Exit(1)
	}
	// The package's parallel tests (the fault suite, the SDK suites, the
	// topologies) wait on failovers, TTLs and other processes far more
	// than they compute: they run all at once after the others, not two
	// at a time (-parallel's default, GOMAXPROCS), which left the CPUs
	// idle for a third of the suite's last minutes. An explicit -parallel
	// still rules.
	flag.Parse()
	explicit := false
	flag.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "test.parallel" })
	if !explicit {
		_ = flag.Set("test.parallel", "8")
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// server is one running lockapi process.
type server struct {
	t    *testing.T
	addr string
	URL  string
	args []string
	env  []string
	// ready is the client that start polls /healthz with.
	ready *http.Client
	// bare runs lockapi as a newcomer would first: no configuration at
	// all, an environment of PATH and HOME only, and no flag but --addr.
	bare bool

	mu   sync.Mutex
	cmd  *exec.Cmd
	logs bytes.Buffer
	exit chan error
}

// startServer runs lockapi serve with the given environment (LOCKAPI_*) and
// flags on a free loopback port, and waits until /healthz answers.
func startServer(t *testing.T, env []string, args ...string) *server {
	t.Helper()
	return launch(t, "http", http.DefaultClient, env, args...)
}

// startBare runs lockapi as a newcomer would first (see server.bare) on
// a free loopback port, and waits until /healthz answers.
func startBare(t *testing.T) *server {
	t.Helper()
	return launchServer(t, &server{t: t, addr: freeAddr(t), ready: http.DefaultClient, bare: true}, "http")
}

// launch starts lockapi serving scheme and waits until /healthz answers
// through ready.
func launch(t *testing.T, scheme string, ready *http.Client, env []string, args ...string) *server {
	t.Helper()
	return launchServer(t, &server{t: t, addr: freeAddr(t), env: env, args: args, ready: ready}, scheme)
}

// launchServer starts s serving scheme, and stops it when t ends.
func launchServer(t *testing.T, s *server, scheme string) *server {
	t.Helper()
	// A first start whose port was taken between freeAddr and lockapi's
	// bind tries another port (restarts keep theirs: their clients know it).
	for tries := 1; ; tries++ {
		s.URL = scheme + "://" + s.addr
		err := s.tryStart()
		if err == nil {
			break
		}
		if !errors.Is(err, errPortTaken) || tries == 3 {
			t.Fatal(err)
		}
		t.Logf("%v; trying another port", errPortTaken)
		s.resetLogs()
		s.addr = freeAddr(t)
	}
	t.Cleanup(func() {
		s.stop()
		if t.Failed() {
			t.Logf("lockapi logs:\n%s", s.Logs())
		}
	})
	return s
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func (s *server) start() {
	s.t.Helper()
	if err := s.tryStart(); err != nil {
		s.t.Fatal(err)
	}
}

// errPortTaken is tryStart's answer when lockapi could not listen on its
// address: freeAddr closes the port it found before lockapi binds it, and
// with packages and tests running side by side another process may take
// it in between.
var errPortTaken = errors.New("address already in use")

// tryStart starts lockapi on s.addr and waits until /healthz answers. It
// fails (with errPortTaken when the address was taken) if lockapi exits
// first or does not answer in time.
func (s *server) tryStart() error {
	s.t.Helper()
	cmd := exec.Command(binary, append([]string{"serve", "--addr", s.addr, "--log-level", "debug"}, s.args...)...)
	cmd.Env = append(os.Environ(), s.env...)
	if s.bare {
		cmd = exec.Command(binary, "--addr", s.addr)
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
	}
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	// listening closes once the startup line ("lockapi listening") is in
	// the logs: lockapi logs it just after it starts serving, so /healthz
	// may answer before the line is written or read from the pipe, and a
	// test reading the startup log would miss it and what came before.
	listening := make(chan struct{})
	if !logsInfo(cmd.Args) {
		close(listening) // a quieter log level leaves the line out
	}
	go func() {
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		told := !logsInfo(cmd.Args)
		for sc.Scan() {
			s.mu.Lock()
			s.logs.Write(sc.Bytes())
			s.logs.WriteByte('\n')
			s.mu.Unlock()
			if !told && bytes.Contains(sc.Bytes(), []byte(`"message":"lockapi listening"`)) {
				close(listening)
				told = true
			}
		}
	}()
	exit := make(chan error, 1)
	go func() { err := cmd.Wait(); pw.Close(); exit <- err }()
	s.mu.Lock()
	s.cmd, s.exit = cmd, exit
	s.mu.Unlock()

	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := s.ready.Get(s.URL + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return s.waitListening(listening, exit, deadline)
			}
		}
		select {
		case err := <-exit:
			if logs := s.Logs(); strings.Contains(logs, "address already in use") {
				return fmt.Errorf("lockapi exited at start: %w (%s)\n%s", errPortTaken, s.addr, logs)
			}
			return fmt.Errorf("lockapi exited at start: %v\n%s", err, s.Logs())
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("lockapi did not answer /healthz: %v\n%s", err, s.Logs())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// logsInfo reports whether lockapi run with args logs info lines: the
// last --log-level decides (the harness passes debug first; bare, the
// default is info).
func logsInfo(args []string) bool {
	level := "info"
	for i, a := range args {
		if a == "--log-level" && i+1 < len(args) {
			level = args[i+1]
		}
	}
	return level == "debug" || level == "info" || level == "trace"
}

// waitListening waits for the startup line of a lockapi that answers
// /healthz, so that a test reading the startup log finds it there.
func (s *server) waitListening(listening <-chan struct{}, exit <-chan error, deadline time.Time) error {
	select {
	case <-listening:
		return nil
	case err := <-exit:
		return fmt.Errorf("lockapi exited at start: %v\n%s", err, s.Logs())
	case <-time.After(time.Until(deadline)):
		return fmt.Errorf("lockapi answers /healthz but never logged \"lockapi listening\"\n%s", s.Logs())
	}
}

// stop sends SIGTERM and waits for the process to exit; it returns the exit
// error (nil for status 0).
func (s *server) stop() error {
	s.mu.Lock()
	cmd, exit := s.cmd, s.exit
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return nil
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-exit:
		return err
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		<-exit
		s.t.Errorf("lockapi did not stop within 30s of SIGTERM")
		return fmt.Errorf("killed")
	}
}

func (s *server) restart() {
	s.t.Helper()
	if err := s.stop(); err != nil {
		s.t.Fatalf("lockapi exited with %v", err)
	}
	s.start()
}

// Logs returns what the process has written so far.
func (s *server) Logs() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.logs.String()
}

// resetLogs forgets the logs of a start that failed.
func (s *server) resetLogs() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.logs.Reset()
}

// api is a client for one server whose every response is validated against
// openapi.yaml.
type api struct {
	t    *testing.T
	base string
	c    *http.Client
}

func newAPI(t *testing.T, s *server) *api {
	return &api{t: t, base: s.URL, c: apitest.NewClient(t, s.URL, apitest.ValidateRequests())}
}

// Lease, LockState and Problem mirror openapi.yaml's schemas.
type Lease struct {
	Lock         string            `json:"lock"`
	LeaseID      string            `json:"lease_id"`
	Owner        string            `json:"owner"`
	FencingToken uint64            `json:"fencing_token"`
	HoldCount    int               `json:"hold_count"`
	TTLMs        int64             `json:"ttl_ms"`
	AcquiredAt   time.Time         `json:"acquired_at"`
	ExpiresAt    time.Time         `json:"expires_at"`
	Metadata     map[string]string `json:"metadata"`

	releaseURL string // filled in by tests that read release_url
}

type LockState struct {
	Lock   string `json:"lock"`
	Held   bool   `json:"held"`
	Holder *struct {
		Owner        string `json:"owner"`
		FencingToken uint64 `json:"fencing_token"`
		HoldCount    int    `json:"hold_count"`
	} `json:"holder"`
	FencingToken uint64 `json:"fencing_token"`
	Index        string `json:"index"`
}

type Problem struct {
	Type   string `json:"type"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
	Holder *struct {
		Owner        string `json:"owner"`
		FencingToken uint64 `json:"fencing_token"`
		ExpiresInMs  int64  `json:"expires_in_ms"`
	} `json:"holder"`
}

// response is a decoded answer: the status, headers and raw body.
type response struct {
	Status int
	Header http.Header
	Body   []byte
}

func (r response) decode(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal(r.Body, v); err != nil {
		t.Fatalf("decode %s: %v", r.Body, err)
	}
}

func (r response) problem(t *testing.T) Problem {
	t.Helper()
	var p Problem
	r.decode(t, &p)
	return p
}

func (a *api) do(ctx context.Context, method, path string, body any) (response, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return response{}, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, a.base+path, rd)
	if err != nil {
		return response{}, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := a.c.Do(req)
	if err != nil {
		return response{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return response{Status: resp.StatusCode, Header: resp.Header, Body: b}, err
}

func (a *api) must(method, path string, body any) response {
	a.t.Helper()
	r, err := a.do(context.Background(), method, path, body)
	if err != nil {
		a.t.Fatalf("%s %s: %v", method, path, err)
	}
	return r
}

// acquire POSTs a lease request and returns the response.
func (a *api) acquire(name string, body map[string]any) response {
	a.t.Helper()
	if body == nil {
		return a.must("POST", "/v1/locks/"+name+"/leases", nil)
	}
	return a.must("POST", "/v1/locks/"+name+"/leases", body)
}

// mustAcquire acquires and fails the test unless the answer is want.
func (a *api) mustAcquire(name string, body map[string]any, want int) Lease {
	a.t.Helper()
	r := a.acquire(name, body)
	if r.Status != want {
		a.t.Fatalf("acquire %s: %d %s, want %d", name, r.Status, r.Body, want)
	}
	var l Lease
	r.decode(a.t, &l)
	return l
}

func (a *api) release(l Lease) response {
	a.t.Helper()
	return a.must("DELETE", "/v1/locks/"+l.Lock+"/leases/"+l.LeaseID, nil)
}

func (a *api) state(name string) LockState {
	a.t.Helper()
	r := a.must("GET", "/v1/locks/"+name, nil)
	if r.Status != 200 {
		a.t.Fatalf("inspect %s: %d %s", name, r.Status, r.Body)
	}
	var st LockState
	r.decode(a.t, &st)
	return st
}

func problemType(slug string) string { return apitest.ProblemTypeBase + slug }

func hasLine(logs, substr string) bool {
	for _, line := range strings.Split(logs, "\n") {
		if strings.Contains(line, substr) {
			return true
		}
	}
	return false
}
