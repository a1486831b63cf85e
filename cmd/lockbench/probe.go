package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// This file measures the three processes of a run: the tool itself
// (getrusage), the server (/metrics, or /proc when it runs on this machine)
// and Redis (INFO). On a small machine they share the same cores, so a
// pairs/s figure means little without knowing which of them was busy.

// toolCPU returns the CPU time (user + system) this process has used.
func toolCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat times: 100 on every
// Linux architecture Go supports (reading it properly needs sysconf, cgo).
const clockTicks = 100

// procCPU returns the CPU time process pid has used, from /proc.
func procCPU(pid int) (time.Duration, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	// The command name (field 2) may contain spaces; fields after its
	// closing parenthesis are fixed: utime and stime are the 12th and 13th.
	rest := b[bytes.LastIndexByte(b, ')')+1:]
	f := strings.Fields(string(rest))
	if len(f) < 13 {
		return 0, false
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	s, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return time.Duration(u+s) * time.Second / clockTicks, true
}

// procRSS returns the resident set size of process pid, from /proc.
func procRSS(pid int) (int64, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, false
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(v)
			if len(f) == 2 && f[1] == "kB" {
				kb, err := strconv.ParseInt(f[0], 10, 64)
				return kb << 10, err == nil
			}
		}
	}
	return 0, false
}

// serverPID finds the process listening on the server URL's port when the
// server runs on this machine (a loopback URL), by matching the listening
// socket's inode in /proc/net/tcp with the descriptors in /proc/*/fd. It
// returns 0 when the server is elsewhere or not readable (another user's
// process): its CPU and RSS are then simply not reported, or come from
// /metrics.
func serverPID(server string) int {
	u, err := url.Parse(server)
	if err != nil {
		return 0
	}
	host, portStr := u.Hostname(), u.Port()
	if portStr == "" {
		portStr = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	if host != "localhost" {
		if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
			return 0
		}
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil {
		return 0
	}
	inodes := map[string]bool{}
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		listeningInodes(f, uint16(port), inodes)
	}
	if len(inodes) == 0 {
		return 0
	}
	fds, _ := filepath.Glob("/proc/[0-9]*/fd/*")
	for _, fd := range fds {
		link, err := os.Readlink(fd)
		if err != nil || !strings.HasPrefix(link, "socket:[") {
			continue
		}
		if inodes[strings.TrimSuffix(strings.TrimPrefix(link, "socket:["), "]")] {
			pid, _ := strconv.Atoi(strings.Split(fd, "/")[2])
			return pid
		}
	}
	return 0
}

// listeningInodes adds the inodes of sockets in LISTEN state (0A) on port
// from a /proc/net/tcp-style file.
func listeningInodes(path string, port uint16, into map[string]bool) {
	f, err := os.Open(path)
	if err != nil {
		return
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Scan() // header
	want := fmt.Sprintf(":%04X", port)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) > 9 && strings.HasSuffix(fs[1], want) && fs[3] == "0A" {
			into[fs[9]] = true
		}
	}
}

// scrapeMetrics reads the server's Prometheus /metrics into name → value,
// summing the series of a name over their labels. ok is false when the
// server has no /metrics (it is optional), and every caller then falls back
// to what it can see without it.
func scrapeMetrics(ctx context.Context, s *session) (m map[string]float64, ok bool) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	rep, err := s.get(ctx, "/metrics")
	if err != nil || rep.status != 200 {
		return nil, false
	}
	m = map[string]float64{}
	for line := range strings.Lines(string(rep.body)) {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' {
			continue
		}
		name, rest := line, ""
		if i := strings.IndexAny(line, "{ "); i >= 0 {
			name, rest = line[:i], line[i:]
		}
		if strings.HasPrefix(rest, "{") {
			// Label values may hold spaces; the value follows the closing brace.
			rest = rest[strings.LastIndexByte(rest, '}')+1:]
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			continue
		}
		m[name] += v
	}
	return m, true
}

// openRedis connects the tool's own Redis client. A pool of one keeps its
// connection count and its own commands predictable, which the idle mode
// subtracts from what it sees.
func openRedis(ctx context.Context, rawURL string, pool int) (*redis.Client, error) {
	o, err := redis.ParseURL(rawURL)
	if err != nil {
		return nil, fmt.Errorf("-redis %q: %v", rawURL, err)
	}
	o.PoolSize = pool
	o.MaxRetries = -1 // a script call is never retried, as in the server
	rdb := redis.NewClient(o)
	pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if err := rdb.Ping(pctx).Err(); err != nil {
		rdb.Close()
		return nil, fmt.Errorf("redis %s does not answer: %v", o.Addr, err)
	}
	return rdb, nil
}

// redisInfo returns one INFO section as field → value.
func redisInfo(ctx context.Context, rdb *redis.Client, section string) (map[string]string, error) {
	s, err := rdb.Info(ctx, section).Result()
	if err != nil {
		return nil, err
	}
	m := map[string]string{}
	for line := range strings.Lines(s) {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			m[k] = v
		}
	}
	return m, nil
}

// redisCPU returns the CPU time Redis has used (INFO cpu).
func redisCPU(ctx context.Context, rdb *redis.Client) (time.Duration, bool) {
	m, err := redisInfo(ctx, rdb, "cpu")
	if err != nil {
		return 0, false
	}
	u, err1 := strconv.ParseFloat(m["used_cpu_user"], 64)
	s, err2 := strconv.ParseFloat(m["used_cpu_sys"], 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return time.Duration((u + s) * float64(time.Second)), true
}

// commandCalls returns the calls of every command from INFO commandstats,
// keyed by command name ("evalsha", "client|list", …).
func commandCalls(ctx context.Context, rdb *redis.Client) (map[string]int64, error) {
	m, err := redisInfo(ctx, rdb, "commandstats")
	if err != nil {
		return nil, err
	}
	calls := map[string]int64{}
	for k, v := range m {
		name, ok := strings.CutPrefix(k, "cmdstat_")
		if !ok {
			continue
		}
		for part := range strings.SplitSeq(v, ",") {
			if n, ok := strings.CutPrefix(part, "calls="); ok {
				calls[name], _ = strconv.ParseInt(n, 10, 64)
			}
		}
	}
	return calls, nil
}

// clientCounts counts Redis's client connections and, among them, those
// subscribed to anything (sub, psub or ssub > 0), leaving out the caller's
// own connection.
func clientCounts(ctx context.Context, rdb *redis.Client) (total, pubsub int, err error) {
	self, err := rdb.ClientID(ctx).Result()
	if err != nil {
		return 0, 0, err
	}
	list, err := rdb.ClientList(ctx).Result()
	if err != nil {
		return 0, 0, err
	}
	for line := range strings.Lines(list) {
		kv := parseLine(line)
		if kv["id"] == strconv.FormatInt(self, 10) || kv["id"] == "" {
			continue
		}
		total++
		for _, k := range []string{"sub", "psub", "ssub"} {
			if n, _ := strconv.Atoi(kv[k]); n > 0 {
				pubsub++
				break
			}
		}
	}
	return total, pubsub, nil
}

// cpuMeter samples the CPU time of the tool, the server (when its process is
// known) and Redis (when -redis is given), so that a run can report how many
// cores each used: on a 2-core machine this is what tells whether the server,
// Redis or the tool itself was the bottleneck.
type cpuMeter struct {
	pid int           // the server's process, 0 if unknown
	rdb *redis.Client // nil without -redis
	// serverless is set when no server process takes part (the baseline),
	// so that the tool and Redis are all there is to account for.
	serverless bool
}

type cpuSample struct {
	at                    time.Time
	tool, server, redis   time.Duration
	machine               time.Duration // busy time of all cores, every process
	haveServer, haveRedis bool
	haveMachine           bool
	serverless            bool
	// redisCmds counts the commands Redis ran (see scriptCommands), and
	// redisReads the reads from client sockets it processed (INFO stats
	// total_reads_processed: about one per pipeline, or per command
	// unpipelined); -1 when unknown.
	redisCmds, redisReads int64
}

func (m *cpuMeter) sample(ctx context.Context) cpuSample {
	s := cpuSample{at: time.Now(), tool: toolCPU()}
	s.machine, s.haveMachine = machineBusy()
	s.serverless = m.serverless
	// An in-process server (the tests) is the tool: counted once.
	if m.pid > 0 && m.pid != os.Getpid() {
		s.server, s.haveServer = procCPU(m.pid)
	}
	s.redisCmds, s.redisReads = -1, -1
	if m.rdb != nil {
		s.redis, s.haveRedis = redisCPU(ctx, m.rdb)
		if calls, err := commandCalls(ctx, m.rdb); err == nil {
			s.redisCmds = scriptCommands(calls)
		}
		if st, err := redisInfo(ctx, m.rdb, "stats"); err == nil {
			if n, err := strconv.ParseInt(st["total_reads_processed"], 10, 64); err == nil {
				s.redisReads = n
			}
		}
	}
	return s
}

// scriptCommands totals INFO commandstats the way a script's cost is
// counted: every command Redis ran, those a script runs one by one
// included, but not the script calls themselves (EVALSHA, FCALL, ...) and
// not the tool's INFO.
func scriptCommands(calls map[string]int64) int64 {
	var n int64
	for name, c := range calls {
		switch name {
		case "eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro", "info":
		default:
			n += c
		}
	}
	return n
}

// addCPU writes the cores each process used between a and b: CPU seconds
// per wall second, so 1.0 is one core fully busy.
func addCPU(r *result, a, b cpuSample) {
	wall := b.at.Sub(a.at).Seconds()
	if wall <= 0 {
		return
	}
	r.setFloat("tool_cpu_s", (b.tool - a.tool).Seconds(), 2)
	r.setFloat("tool_cpu_cores", (b.tool-a.tool).Seconds()/wall, 2)
	if a.haveServer && b.haveServer {
		r.setFloat("server_cpu_cores", (b.server-a.server).Seconds()/wall, 2)
	}
	if a.haveRedis && b.haveRedis {
		r.setFloat("redis_cpu_cores", (b.redis-a.redis).Seconds()/wall, 2)
	}
	// What neither of the three used: other processes competing for the
	// same cores, which makes a run on a shared machine not comparable.
	server := a.haveServer && b.haveServer
	if a.haveMachine && b.haveMachine && a.haveRedis && b.haveRedis && (server || a.serverless) {
		ours := (b.tool - a.tool) + (b.server - a.server) + (b.redis - a.redis)
		r.setFloat("other_cpu_cores", max((b.machine-a.machine-ours).Seconds()/wall, 0), 2)
	}
}

// machineBusy returns the time all cores spent busy (not idle, not waiting
// for I/O) since boot, from /proc/stat.
func machineBusy() (time.Duration, bool) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, false
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 8 || f[0] != "cpu" {
		return 0, false
	}
	var busy int64
	for i, v := range f[1:8] { // user nice system idle iowait irq softirq
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, false
		}
		if i != 3 && i != 4 {
			busy += n
		}
	}
	return time.Duration(busy) * time.Second / clockTicks, true
}

// loadAverage returns the 1-minute load average, as /proc/loadavg says.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return ""
	}
	return f[0]
}
