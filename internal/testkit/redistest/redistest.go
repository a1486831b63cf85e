// Package redistest gives tests a real Redis server. Tests never mock Redis:
// the lock scripts, TTLs and fencing tokens only mean something against the
// real thing.
//
// Start looks for a server in this order:
//
//  1. LOCKAPI_TEST_REDIS_URL, an explicit server that may be shared, so
//     callers must use unique key prefixes;
//  2. redis-server from PATH, run as a child process on a free loopback port
//     with persistence off, one fresh process per call;
//  3. a redis:7 container through Docker (dockertest), when an engine answers;
//  4. otherwise the test is skipped, or fails when the CI variable is set, so
//     CI can't go green by silently skipping every Redis test.
//
// StartAOF, StartSentinel and StartCluster always run redis-server from PATH
// (same skip-or-fail rule), because what they test is what only owned
// processes can do: keep data across kill -9 (StartAOF), fail over between
// a master, a replica and three sentinels (StartSentinel), or between three
// masters with one replica each (StartCluster). Each process is a Node, whose
// fault verbs (Kill, Pause, Continue, ClientPause, Restart) make it fail the
// ways production Redis does, so tests can check what the lock service does
// then. Everything listens on 127.0.0.1 only, every wait is bounded, and
// cleanup kills every process by its PID.
package redistest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ory/dockertest/v3"
	"github.com/ory/dockertest/v3/docker"
	"github.com/redis/go-redis/v9"
)

// EnvURL names the environment variable holding an explicit Redis URL.
const EnvURL = "LOCKAPI_TEST_REDIS_URL"

const (
	// readyTimeout bounds every wait for a server to come up or go away.
	readyTimeout = 10 * time.Second
	// portAttempts is how often Start retries with a new port. The free port
	// is only probed, not held, so another process can take it before
	// redis-server binds it.
	portAttempts = 5
)

// Server is a Redis server for one test (or one package's tests).
type Server struct {
	URL  string // redis://127.0.0.1:PORT/0 (or the explicit URL)
	Addr string // host:port

	node *Node // nil unless this package runs the redis-server
}

// Start returns a running Redis server that lives until the end of tb.
// See the package doc for where the server comes from.
func Start(tb testing.TB) *Server {
	tb.Helper()
	return StartWith(tb)
}

// StartWith is Start with extra redis-server arguments, for example TLS
// settings. Only a redis-server this package runs can take them, so the test
// is skipped when the server would come from LOCKAPI_TEST_REDIS_URL or Docker.
// The arguments must keep the plain TCP port on (no "--port 0"): readiness
// checks, Stop and Resume use it.
func StartWith(tb testing.TB, extraArgs ...string) *Server {
	tb.Helper()
	if url := os.Getenv(EnvURL); url != "" {
		if len(extraArgs) > 0 {
			tb.Skipf("redistest: %s is set, and extra redis-server arguments %q need a server started by redistest", EnvURL, extraArgs)
		}
		return fromURL(tb, url)
	}
	if bin, err := exec.LookPath("redis-server"); err == nil {
		return startProcess(tb, bin, extraArgs, false)
	}
	if s := startDocker(tb, extraArgs); s != nil {
		return s
	}
	unavailable(tb, "redistest: no Redis available: install redis-server (apt-get install redis-server, or brew install redis), "+
		"start a Docker engine, or set "+EnvURL+"=redis://host:port/0")
	return nil
}

// StartAOF is StartWith for a server whose data must outlive a crash, as a
// production server's does: it runs with appendonly yes and appendfsync
// always, so every write it acknowledged is on disk before the reply and
// survives Stop (kill -9) and Resume. Node(tb).Restart(tb, false) still
// brings it back empty. Only a redis-server from PATH can do that, so
// LOCKAPI_TEST_REDIS_URL and Docker don't count: the test is skipped (or
// fails when CI is set) without one.
func StartAOF(tb testing.TB, extraArgs ...string) *Server {
	tb.Helper()
	bin := lookBins(tb, "StartAOF", "redis-server")[0]
	return startProcess(tb, bin, extraArgs, true)
}

// Client returns a new go-redis client for s, closed when tb ends.
func (s *Server) Client(tb testing.TB) *redis.Client {
	tb.Helper()
	opt, err := redis.ParseURL(s.URL)
	if err != nil {
		tb.Fatalf("redistest: parse %q: %v", s.URL, err)
	}
	c := redis.NewClient(opt)
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// CanRestart reports whether Stop, Resume, Restart and Node work on s: only
// for a redis-server process this package started.
func (s *Server) CanRestart() bool { return s.node != nil }

// Node returns the process behind s, for the fault verbs Stop and Resume
// don't cover (Pause, ClientPause, Restart with or without AOF). On a server
// that can't restart it skips the test, as Stop does.
func (s *Server) Node(tb testing.TB) *Node {
	tb.Helper()
	s.mustRestart(tb)
	return s.node
}

// Stop kills the server and returns once its port refuses connections, so a
// test can observe Redis being down. The port is not held while stopped:
// Resume reuses it and fails if another process took it meanwhile.
// Stop on a server that can't restart skips the test.
func (s *Server) Stop(tb testing.TB) {
	tb.Helper()
	s.mustRestart(tb)
	s.node.Kill(tb)
}

// Resume starts the server again on the same port and waits until it answers
// PING. A server from StartAOF comes back with its data; otherwise
// persistence is off, so it comes back empty.
func (s *Server) Resume(tb testing.TB) {
	tb.Helper()
	s.mustRestart(tb)
	n := s.node
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.proc != nil {
		tb.Fatalf("redistest: Resume on %s, which is running; call Stop first", s.Addr)
	}
	if err := n.launch(); err != nil {
		tb.Fatalf("redistest: resume redis-server on %s (was the port taken meanwhile?): %v", s.Addr, err)
	}
}

// Restart is Stop then Resume, on the same port: the server comes back
// empty, or with its data when it came from StartAOF.
func (s *Server) Restart(tb testing.TB) {
	tb.Helper()
	s.Stop(tb)
	s.Resume(tb)
}

func (s *Server) mustRestart(tb testing.TB) {
	tb.Helper()
	if !s.CanRestart() {
		tb.Skipf("redistest: %s was not started by redistest and can't be stopped; check CanRestart", s.Addr)
	}
}

// fromURL uses an explicit, possibly shared server. It must answer: a wrong
// URL is a configuration error, not a reason to skip.
func fromURL(tb testing.TB, url string) *Server {
	tb.Helper()
	opt, err := redis.ParseURL(url)
	if err != nil {
		tb.Fatalf("redistest: %s=%q: %v", EnvURL, url, err)
	}
	c := redis.NewClient(opt)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		tb.Fatalf("redistest: %s=%q does not answer PING: %v", EnvURL, url, err)
	}
	return &Server{URL: url, Addr: opt.Addr}
}

// startProcess runs a fresh redis-server owned by tb, with persistence off
// unless aof.
func startProcess(tb testing.TB, bin string, extra []string, aof bool) *Server {
	tb.Helper()
	dir := tb.TempDir()
	extra = slices.Clone(extra)
	n, err := startNode(tb, nodeSpec{
		bin: bin,
		dir: dir,
		aof: aof,
		args: func(port int) ([]string, error) {
			return serverArgs(port, dir, aof, extra), nil
		},
	})
	if err != nil {
		tb.Fatalf("redistest: start redis-server: %v", err)
	}
	return &Server{URL: "redis://" + n.Addr() + "/0", Addr: n.Addr(), node: n}
}

// serverArgs are the redis-server arguments of a standalone Server. They go
// on the command line rather than in a file, so extra arguments override
// them and a bad one shows up in the log as written.
func serverArgs(port int, dir string, aof bool, extra []string) []string {
	args := []string{
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--dir", dir,
		"--logfile", filepath.Join(dir, "redis.log"),
	}
	if aof {
		args = append(args, "--appendonly", "yes", "--appendfsync", "always")
	} else {
		args = append(args, "--appendonly", "no")
	}
	return append(args, extra...)
}

// waitReady PINGs addr until it answers, then checks through INFO that the
// answer comes from process pid: if another redis-server took the port first,
// ours fails to bind and exits, while PING would still succeed.
func waitReady(addr string, pid int, exited <-chan struct{}) error {
	c := redis.NewClient(&redis.Options{
		Addr:          addr,
		DialTimeout:   200 * time.Millisecond,
		ReadTimeout:   time.Second,
		MaxRetries:    -1,
		DialerRetries: 1,
		PoolSize:      1,
	})
	defer c.Close()

	deadline := time.Now().Add(readyTimeout)
	var err error
	for time.Now().Before(deadline) {
		var got int
		if got, err = probe(c, addr); err == nil {
			if got == pid {
				return nil
			}
			err = fmt.Errorf("%s is served by another redis-server (process_id %d, ours is %d)", addr, got, pid)
		}
		select {
		case <-exited:
			return fmt.Errorf("redis-server exited before answering on %s (last probe: %v)", addr, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
	return fmt.Errorf("redis-server not ready on %s after %v: %v", addr, readyTimeout, err)
}

// probe PINGs addr and returns the process_id of the server that answered.
func probe(c *redis.Client, addr string) (int, error) {
	// A plain dial first: go-redis logs every failed dial, which would flood
	// test output while the server is still starting.
	conn, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return 0, err
	}
	_ = conn.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		return 0, err
	}
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		return 0, err
	}
	return infoPID(info), nil
}

// infoPID returns process_id from INFO server output, or 0.
func infoPID(info string) int {
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "process_id:"); ok {
			pid, _ := strconv.Atoi(v)
			return pid
		}
	}
	return 0
}

// startDocker runs redis:7 in a container, or returns nil when no Docker
// engine answers.
func startDocker(tb testing.TB, extraArgs []string) *Server {
	tb.Helper()
	pool, err := dockertest.NewPool("")
	if err != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if pool.Client.PingWithContext(ctx) != nil {
		return nil
	}
	if len(extraArgs) > 0 {
		tb.Skipf("redistest: redis-server is not in PATH, and extra arguments %q need a server started by redistest", extraArgs)
	}

	res, err := pool.RunWithOptions(&dockertest.RunOptions{
		Repository: "redis",
		Tag:        "7",
		Cmd:        []string{"redis-server", "--save", "", "--appendonly", "no"},
	}, func(hc *docker.HostConfig) {
		hc.AutoRemove = true
		hc.RestartPolicy = docker.RestartPolicy{Name: "no"}
	})
	if err != nil {
		tb.Fatalf("redistest: run redis:7 container: %v", err)
	}
	tb.Cleanup(func() { _ = pool.Purge(res) })

	addr := res.GetHostPort("6379/tcp")
	s := &Server{Addr: addr, URL: "redis://" + addr + "/0"}
	c := redis.NewClient(&redis.Options{Addr: addr, DialTimeout: time.Second, MaxRetries: -1})
	defer c.Close()
	pool.MaxWait = 30 * time.Second // a cold container is slower than a local process
	if err := pool.Retry(func() error { return c.Ping(context.Background()).Err() }); err != nil {
		tb.Fatalf("redistest: redis:7 container on %s does not answer PING: %v", addr, err)
	}
	return s
}
