package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockapi/lockapi/internal/testkit/proctest"
)

const (
	// pollInterval is how often the topology waits look again. Redis gossips
	// and reconfigures on a 100 ms clock, so polling faster buys nothing.
	pollInterval = 50 * time.Millisecond
	// busOffset is what Redis 7.0 adds to a cluster node's port for its
	// cluster bus port (cluster-port 0 means port+10000).
	busOffset = 10000
	// maxBusPort keeps port+busOffset a valid port.
	maxBusPort = 65535 - busOffset
)

// PauseMode says which commands CLIENT PAUSE holds back.
type PauseMode string

const (
	// PauseWrite holds back writes only: reads still answer, as on a master
	// that a failover is draining.
	PauseWrite PauseMode = "WRITE"
	// PauseAll holds back every client command, like a slow master whose
	// process still accepts connections.
	PauseAll PauseMode = "ALL"
)

// Node is one redis-server process this package runs: a Server from Start,
// or a master, replica or sentinel of a Sentinel, or a member of a Cluster.
// Its fault verbs (Kill, Pause, ClientPause, Restart) are the ways production
// Redis misbehaves, so tests can check what the lock service does then.
//
// A Node keeps its port and directory for its whole life: Restart comes back
// on the same address with the same configuration files, which sentinels
// (CONFIG REWRITE after REPLICAOF) and the cluster (nodes.conf) keep up to
// date as roles change, so it rejoins its topology in the role it had last.
type Node struct {
	addr string // 127.0.0.1:port
	port int
	bin  string
	dir  string        // the node's own directory: config, logs, data
	args []string      // redis-server arguments; Restart reuses them
	aof  bool          // runs with appendonly yes, so Restart(tb, true) can keep data
	id   string        // cluster node ID; empty outside a Cluster
	ctl  *redis.Client // short timeouts, for this package's own probes

	// mu serializes the verbs that replace or signal proc.
	mu     sync.Mutex
	proc   *process // nil while killed
	paused bool     // SIGSTOPped
}

// process is one run of redis-server.
type process struct {
	cmd    *exec.Cmd
	exited chan struct{} // closed once cmd.Wait has returned
}

// nodeSpec says how to start a Node.
type nodeSpec struct {
	bin string
	dir string // created if missing
	aof bool
	// port is the first port to try; 0 picks a free one.
	port int
	// bus says the node needs port+10000 free too, for the cluster bus.
	bus bool
	// args writes whatever configuration file the node needs for port and
	// returns the redis-server arguments. It is called again with a new port
	// when the first one turns out to be taken.
	args func(port int) ([]string, error)
}

// startNode runs a fresh Node owned by tb. The port is only probed before
// redis-server binds it, so a lost race is retried on a new port.
func startNode(tb testing.TB, spec nodeSpec) (*Node, error) {
	tb.Helper()
	if err := os.MkdirAll(spec.dir, 0o755); err != nil {
		return nil, err
	}
	n := &Node{bin: spec.bin, dir: spec.dir, aof: spec.aof}
	// kill is a no-op once the node is killed, so cleanup and Kill can't clash.
	tb.Cleanup(func() {
		n.mu.Lock()
		defer n.mu.Unlock()
		n.kill()
	})

	n.mu.Lock()
	defer n.mu.Unlock()
	port := spec.port
	var err error
	for range portAttempts {
		if port == 0 {
			if port, err = pickPort(spec.bus); err != nil {
				return nil, err
			}
		}
		if n.args, err = spec.args(port); err != nil {
			return nil, err
		}
		n.port = port
		n.addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		if err = n.launch(); err == nil {
			n.ctl = controlClient(n.addr)
			tb.Cleanup(func() { _ = n.ctl.Close() })
			return n, nil
		}
		port = 0
	}
	return nil, err
}

// pickPort returns a free loopback port. With bus, port+10000 was free too
// and both stay below 65536: Redis 7.0 puts the cluster bus there and fails
// to start when it can't bind it.
func pickPort(bus bool) (int, error) {
	var err error
	for range 50 {
		var port int
		if port, err = proctest.FreePort(); err != nil {
			return 0, err
		}
		if !bus {
			return port, nil
		}
		if port > maxBusPort {
			err = fmt.Errorf("port %d leaves no room for its cluster bus port", port)
			continue
		}
		var l net.Listener
		if l, err = net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port+busOffset))); err != nil {
			continue
		}
		_ = l.Close()
		return port, nil
	}
	return 0, fmt.Errorf("no free port pair for a cluster node: %w", err)
}

// controlClient is the client this package probes a node with: no retries
// and short timeouts, because every caller polls again anyway and a probe of
// a paused node must not stall a bounded wait.
func controlClient(addr string) *redis.Client {
	return redis.NewClient(controlOptions(addr))
}

// controlOptions are the options of controlClient, for a sentinel's client
// too.
func controlOptions(addr string) *redis.Options {
	return &redis.Options{
		Addr:          addr,
		DialTimeout:   200 * time.Millisecond,
		ReadTimeout:   time.Second,
		WriteTimeout:  time.Second,
		MaxRetries:    -1,
		DialerRetries: 1,
		PoolSize:      2,
	}
}

// Addr returns the node's host:port. It never changes, Restart included.
func (n *Node) Addr() string { return n.addr }

// PID returns the process ID of the running redis-server, or 0 after Kill.
func (n *Node) PID() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.proc == nil {
		return 0
	}
	return n.proc.cmd.Process.Pid
}

// String returns the address, so failure messages name the node.
func (n *Node) String() string { return n.addr }

// Client returns a new go-redis client for this one node, closed when tb
// ends. It is a plain client: on a cluster node it gets MOVED for other
// nodes' slots, and on a replica it only reads.
func (n *Node) Client(tb testing.TB) *redis.Client {
	tb.Helper()
	c := redis.NewClient(&redis.Options{Addr: n.addr})
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// Kill sends SIGKILL, as a crash or OOM kill would, and returns once the
// process has exited and its port refuses connections. Nothing is flushed:
// only what an AOF node synced survives. Kill on a killed node does nothing.
func (n *Node) Kill(tb testing.TB) {
	tb.Helper()
	n.mu.Lock()
	n.kill()
	n.mu.Unlock()
	if err := waitRefused(n.addr); err != nil {
		tb.Fatalf("redistest: %v", err)
	}
}

// Pause sends SIGSTOP: the process keeps its sockets, so clients connect and
// then hang, like a master stuck in a long fork or a GC-paused VM. Peers
// (sentinels, cluster nodes) see it stop answering and may fail it over.
// Continue resumes it; cleanup kills it either way.
func (n *Node) Pause(tb testing.TB) {
	tb.Helper()
	n.signal(tb, syscall.SIGSTOP, true)
}

// Continue sends SIGCONT to a node stopped by Pause. The node resumes
// unaware that time passed, which is the point: it may still believe it is a
// master.
func (n *Node) Continue(tb testing.TB) {
	tb.Helper()
	n.signal(tb, syscall.SIGCONT, false)
}

func (n *Node) signal(tb testing.TB, sig syscall.Signal, pause bool) {
	tb.Helper()
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.proc == nil {
		tb.Fatalf("redistest: %v on %s, which is not running", sig, n.addr)
	}
	pid := n.proc.cmd.Process.Pid
	if err := n.proc.cmd.Process.Signal(sig); err != nil {
		tb.Fatalf("redistest: %v to redis-server %d on %s: %v", sig, pid, n.addr, err)
	}
	n.paused = pause
	if pause {
		// Signals are delivered asynchronously; wait until the kernel
		// reports the process stopped, so the caller's next step really
		// meets a stopped server.
		if err := waitStopped(pid); err != nil {
			tb.Fatalf("redistest: %s: %v", n.addr, err)
		}
	}
}

// ClientPause runs CLIENT PAUSE for d in mode. Unlike Pause, the server keeps
// running: replication, gossip and sentinels' pings still flow, only client
// commands wait, which is how Redis itself drains a master in a failover.
// It returns once the pause is in force; the server lifts it after d.
func (n *Node) ClientPause(tb testing.TB, d time.Duration, mode PauseMode) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	ms := max(d.Milliseconds(), 1)
	if err := n.ctl.Do(ctx, "CLIENT", "PAUSE", ms, string(mode)).Err(); err != nil {
		tb.Fatalf("redistest: CLIENT PAUSE %d %s on %s: %v", ms, mode, n.addr, err)
	}
}

// Restart kills the node if it runs, then starts it again on the same port,
// in the same directory and with the same configuration file, and waits
// until it answers PING.
//
// With aof, the node reloads its append-only file, so every write it
// acknowledged survives: the node must have run with appendonly yes from the
// start (StartAOF, WithAOF), or the test fails. Without aof, the node's data
// files are deleted first and it comes back empty, like a machine that lost
// its disk; a replica then resyncs from its master, and an empty master is
// what a lock service must survive. The configuration and a cluster node's
// nodes.conf are kept either way, so the node rejoins as itself. A restarted
// cluster master answers keyed commands with CLUSTERDOWN for about 2 s,
// Redis's own pause before serving slots again; Cluster.WaitHealthy waits
// that out.
func (n *Node) Restart(tb testing.TB, aof bool) {
	tb.Helper()
	if aof && !n.aof {
		tb.Fatalf("redistest: Restart(aof=true) on %s, which runs without AOF; start it with StartAOF or WithAOF", n.addr)
	}
	n.Kill(tb)
	n.mu.Lock()
	defer n.mu.Unlock()
	if !aof {
		if err := n.wipe(); err != nil {
			tb.Fatalf("redistest: delete data of %s: %v", n.addr, err)
		}
	}
	if err := n.launch(); err != nil {
		tb.Fatalf("redistest: restart redis-server on %s (was the port taken meanwhile?): %v", n.addr, err)
	}
}

// wipe deletes the data files Redis would load at startup: the RDB (also
// written by a replica's full sync) and the append-only directory.
// n.mu must be held and the node killed.
func (n *Node) wipe() error {
	paths, _ := filepath.Glob(filepath.Join(n.dir, "temp-*.rdb"))
	paths = append(paths, filepath.Join(n.dir, "dump.rdb"), filepath.Join(n.dir, "appendonlydir"))
	var errs []error
	for _, p := range paths {
		errs = append(errs, os.RemoveAll(p))
	}
	return errors.Join(errs...)
}

// live reports whether the node runs and is not stopped by Pause, that is
// whether it can answer a probe.
func (n *Node) live() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.proc != nil && !n.paused
}

// logPath is where every run of the node logs; launch appends to it.
func (n *Node) logPath() string { return filepath.Join(n.dir, "redis.log") }

// launch runs redis-server with n.args and waits until it answers on n.addr.
// On error the process is gone and the error carries the tail of its log.
// n.mu must be held.
func (n *Node) launch() error {
	if n.proc != nil {
		return fmt.Errorf("redis-server on %s is already running", n.addr)
	}
	logPath := n.logPath()
	// Early errors (bad arguments) go to stdout before logfile takes effect,
	// so both land in the same file.
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logFile.Close() // the child keeps its own descriptor

	cmd := exec.Command(n.bin, n.args...)
	cmd.Dir = n.dir
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		return err
	}
	p := &process{cmd: cmd, exited: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(p.exited)
	}()
	n.proc = p

	if err := waitReady(n.addr, cmd.Process.Pid, p.exited); err != nil {
		n.kill()
		return fmt.Errorf("%w\n--- tail of %s ---\n%s", err, logPath, proctest.Tail(logPath, 20))
	}
	return nil
}

// kill stops the current process, if any, and waits until it has exited.
// SIGKILL also ends a process stopped by Pause. n.mu must be held.
func (n *Node) kill() {
	if n.proc == nil {
		return
	}
	_ = n.proc.cmd.Process.Kill() // fails only if it already exited
	<-n.proc.exited
	n.proc = nil
	n.paused = false
}

// waitRefused returns once addr refuses connections. The kernel closes the
// listener with the process, so this is usually immediate; it guards against
// a test racing a still-open socket.
func waitRefused(addr string) error {
	deadline := time.Now().Add(readyTimeout)
	for {
		conn, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err != nil {
			return nil
		}
		_ = conn.Close()
		if time.Now().After(deadline) {
			return fmt.Errorf("%s still accepts connections %v after redis-server was killed", addr, readyTimeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitStopped returns once /proc says pid is stopped. Without /proc (not
// Linux) it trusts the signal.
func waitStopped(pid int) error {
	path := fmt.Sprintf("/proc/%d/stat", pid)
	deadline := time.Now().Add(2 * time.Second)
	for {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil
		}
		// The state follows the command name, which is in parentheses and
		// may itself contain spaces.
		if i := strings.LastIndexByte(string(b), ')'); i >= 0 {
			if f := strings.Fields(string(b[i+1:])); len(f) > 0 && (f[0] == "T" || f[0] == "t") {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis-server %d not stopped 2s after SIGSTOP", pid)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// info returns the fields of INFO section on n.
func (n *Node) info(section string) (map[string]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	s, err := n.ctl.Info(ctx, section).Result()
	if err != nil {
		return nil, fmt.Errorf("INFO %s on %s: %w", section, n.addr, err)
	}
	return infoFields(s), nil
}

// infoFields splits INFO output into its key:value fields.
func infoFields(info string) map[string]string {
	m := make(map[string]string)
	for line := range strings.Lines(info) {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok && !strings.HasPrefix(k, "#") {
			m[k] = v
		}
	}
	return m
}

// replicaOf checks from n's own INFO that it replicates from master with a
// live link, so what the master acknowledged reaches it.
func (n *Node) replicaOf(master string) error {
	f, err := n.info("replication")
	if err != nil {
		return err
	}
	if f["role"] != "slave" {
		return fmt.Errorf("%s has role %s, want slave", n.addr, f["role"])
	}
	if got := net.JoinHostPort(f["master_host"], f["master_port"]); got != master {
		return fmt.Errorf("%s replicates %s, want %s", n.addr, got, master)
	}
	if f["master_link_status"] != "up" {
		return fmt.Errorf("%s: master_link_status %s", n.addr, f["master_link_status"])
	}
	return nil
}

// isMaster checks from n's own INFO that it acts as a master.
func (n *Node) isMaster() error {
	f, err := n.info("replication")
	if err != nil {
		return err
	}
	if f["role"] != "master" {
		return fmt.Errorf("%s has role %s, want master", n.addr, f["role"])
	}
	return nil
}

// waitFor polls check until it returns nil or timeout has passed, and then
// returns check's last error. Every check must itself be bounded.
func waitFor(timeout time.Duration, check func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := check()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not reached after %v: %w", timeout, err)
		}
		time.Sleep(pollInterval)
	}
}

// logTails returns the end of every node's log, for a failure message.
func logTails(nodes []*Node) string {
	var b strings.Builder
	for _, n := range nodes {
		fmt.Fprintf(&b, "\n--- tail of %s (%s) ---\n%s\n", n.logPath(), n.addr, proctest.Tail(n.logPath(), 10))
	}
	return b.String()
}

// writeConf writes a redis.conf of directives, one per line.
func writeConf(path string, directives ...string) error {
	return os.WriteFile(path, []byte(strings.Join(directives, "\n")+"\n"), 0o644)
}

// dataDirectives is the configuration every data node (not a sentinel) of a
// topology shares: loopback only, no RDB snapshots, AOF only when asked, and
// no delay before a full sync, so a fresh or restarted replica is in sync at
// once instead of after the 5 s default.
func dataDirectives(port int, dir string, aof bool) []string {
	d := []string{
		"port " + strconv.Itoa(port),
		"bind 127.0.0.1",
		"dir " + strconv.Quote(dir),
		"logfile " + strconv.Quote(filepath.Join(dir, "redis.log")),
		`save ""`,
		"repl-diskless-sync-delay 0",
	}
	if aof {
		return append(d, aofDirectives...)
	}
	return append(d, "appendonly no")
}

// aofDirectives make every acknowledged write survive kill -9: the AOF is
// fsynced before the reply goes out.
var aofDirectives = []string{"appendonly yes", "appendfsync always"}

// Option configures StartSentinel, StartCluster and StartRedlock.
type Option func(*options)

type options struct {
	aof bool
	// failoverTimeout is the sentinels' failover-timeout, 0 for
	// sentinelFailoverTimeout.
	failoverTimeout time.Duration
}

// WithAOF runs every data node with appendonly yes and appendfsync always,
// so Node.Restart(tb, true) brings a node back with every write it
// acknowledged, as a production node with persistence would.
func WithAOF() Option { return func(o *options) { o.aof = true } }

// WithFailoverTimeout sets the sentinels' failover-timeout (StartSentinel;
// 2 s otherwise). lockapi's write gate holds writes for at most this plus
// a second, so a test of that bound sets what it measures against.
func WithFailoverTimeout(d time.Duration) Option {
	return func(o *options) { o.failoverTimeout = d }
}

func applyOptions(opts []Option) options {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

// lookBins finds the named programs in PATH, or skips the test (fails under
// CI) naming what is missing: topologies need real processes, so neither
// LOCKAPI_TEST_REDIS_URL nor Docker can stand in.
func lookBins(tb testing.TB, what string, names ...string) []string {
	tb.Helper()
	paths := make([]string, len(names))
	for i, name := range names {
		p, err := exec.LookPath(name)
		if err != nil {
			unavailable(tb, fmt.Sprintf("redistest: %s needs %s in PATH (apt-get install redis-server, or brew install redis)", what, name))
		}
		paths[i] = p
	}
	return paths
}

// unavailable skips the test, or fails it when the CI variable is set, so CI
// can't go green by silently skipping every Redis test.
func unavailable(tb testing.TB, msg string) {
	tb.Helper()
	if os.Getenv("CI") != "" {
		tb.Fatalf("%s (failing rather than skipping because CI is set)", msg)
	}
	tb.Skip(msg)
}
