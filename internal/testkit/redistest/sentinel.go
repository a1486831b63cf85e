package redistest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// SentinelMaster is the master name the sentinels of StartSentinel monitor,
// the master_name of Sentinel.URL.
const SentinelMaster = "lockapi"

const (
	// sentinelQuorum is how many sentinels must agree the master is down:
	// a majority of three, so one sentinel alone can't fail it over.
	sentinelQuorum = 2
	// downAfter is how long the master must be silent before a sentinel
	// calls it down: far below the 30 s default so failover tests are quick,
	// but not 1 s. After a failover each sentinel resets its clock for the
	// new master and reconnects at most once per ping period (1 s); with
	// down-after at 1 s the first PONG can arrive too late, the new master
	// is called down, stale "down" votes about the old one make that
	// objective at once, and a healthy new master is failed over again.
	// That happened in 3 of 10 loaded runs; 2 s leaves a second of margin.
	downAfter = 2000 * time.Millisecond
	// sentinelFailoverTimeout bounds each failover step and spaces automatic
	// retries (2× this). Promotion is observed within ~1 s on loopback, so
	// 2 s is enough and keeps a second failover from waiting long. See
	// WithFailoverTimeout.
	sentinelFailoverTimeout = 2000 * time.Millisecond

	// settleTimeout bounds the wait for a topology to be fully formed.
	settleTimeout = 20 * time.Second
	// failoverWait bounds the wait for a new master to be announced.
	failoverWait = 20 * time.Second
)

// Sentinel is a Redis Sentinel deployment for one test: one master, one
// replica and three sentinels, all redis-server processes on loopback ports
// in a temporary directory. It is the smallest setup in which a failover
// really happens: two of three sentinels must agree the master is down.
type Sentinel struct {
	// SentinelAddrs are the sentinels' host:port addresses.
	SentinelAddrs []string

	data      []*Node // master first, as started; roles change later
	sentinels []*Node
	sc        []*redis.SentinelClient // one per sentinel, short timeouts
}

// StartSentinel starts a Sentinel that lives until the end of tb and returns
// once it can fail over at once: the replica is in sync and every sentinel
// knows the master, the replica and the two other sentinels.
//
// It needs redis-server in PATH; without it the test is skipped, or fails
// when CI is set.
func StartSentinel(tb testing.TB, opts ...Option) *Sentinel {
	tb.Helper()
	bin := lookBins(tb, "StartSentinel", "redis-server")[0]
	o := applyOptions(opts)
	if o.failoverTimeout <= 0 {
		o.failoverTimeout = sentinelFailoverTimeout
	}
	base := tb.TempDir()
	start := time.Now()
	s := &Sentinel{}

	dataNode := func(i int, replicaOf string) *Node {
		dir := filepath.Join(base, fmt.Sprintf("data%d", i))
		n, err := startNode(tb, nodeSpec{
			bin: bin, dir: dir, aof: o.aof,
			// The role lives in the file, not on the command line, so the
			// CONFIG REWRITE a sentinel sends with REPLICAOF is what a
			// restart reads.
			args: func(port int) ([]string, error) {
				d := dataDirectives(port, dir, o.aof)
				if replicaOf != "" {
					d = append(d, "replicaof "+strings.Replace(replicaOf, ":", " ", 1))
				}
				conf := filepath.Join(dir, "redis.conf")
				return []string{conf}, writeConf(conf, d...)
			},
		})
		if err != nil {
			tb.Fatalf("redistest: start Sentinel data node: %v", err)
		}
		return n
	}
	master := dataNode(1, "")
	replica := dataNode(2, master.addr)
	s.data = []*Node{master, replica}

	// Sentinels find each other through hello messages every 2 s. Writing
	// what they would learn into their files (as a rewritten sentinel.conf
	// holds it) saves those seconds; a sentinel whose port had to change
	// is corrected by the same hello messages.
	const count = 3
	ports := make([]int, count)
	ids := make([]string, count)
	for i := range count {
		var err error
		if ports[i], err = pickPort(false); err != nil {
			tb.Fatalf("redistest: %v", err)
		}
		ids[i] = sentinelID()
	}
	for i := range count {
		dir := filepath.Join(base, fmt.Sprintf("sentinel%d", i+1))
		n, err := startNode(tb, nodeSpec{
			bin: bin, dir: dir, port: ports[i],
			args: func(port int) ([]string, error) {
				conf := filepath.Join(dir, "sentinel.conf")
				return []string{conf, "--sentinel"}, writeConf(conf, sentinelDirectives(port, dir, ids[i], master.port, replica.port, ports, ids, o.failoverTimeout)...)
			},
		})
		if err != nil {
			tb.Fatalf("redistest: start sentinel: %v", err)
		}
		ports[i] = n.port
		s.sentinels = append(s.sentinels, n)
		s.SentinelAddrs = append(s.SentinelAddrs, n.addr)
		sc := redis.NewSentinelClient(controlOptions(n.addr))
		tb.Cleanup(func() { _ = sc.Close() })
		s.sc = append(s.sc, sc)
	}

	if err := waitFor(settleTimeout, func() error { return s.healthy(master.addr) }); err != nil {
		tb.Fatalf("redistest: Sentinel not formed: %v%s", err, logTails(s.all()))
	}
	tb.Logf("redistest: Sentinel master %s, replica %s, sentinels %v ready in %v",
		master.addr, replica.addr, s.SentinelAddrs, time.Since(start).Round(time.Millisecond))
	return s
}

// sentinelDirectives is the sentinel.conf of sentinel id on port.
func sentinelDirectives(port int, dir, id string, masterPort, replicaPort int, ports []int, ids []string, failoverTimeout time.Duration) []string {
	m := SentinelMaster
	d := []string{
		"port " + strconv.Itoa(port),
		"bind 127.0.0.1",
		"dir " + strconv.Quote(dir),
		"logfile " + strconv.Quote(filepath.Join(dir, "redis.log")),
		"sentinel myid " + id,
		fmt.Sprintf("sentinel monitor %s 127.0.0.1 %d %d", m, masterPort, sentinelQuorum),
		fmt.Sprintf("sentinel down-after-milliseconds %s %d", m, downAfter.Milliseconds()),
		fmt.Sprintf("sentinel failover-timeout %s %d", m, failoverTimeout.Milliseconds()),
		"sentinel parallel-syncs " + m + " 1",
		fmt.Sprintf("sentinel known-replica %s 127.0.0.1 %d", m, replicaPort),
	}
	for j, p := range ports {
		if ids[j] != id {
			d = append(d, fmt.Sprintf("sentinel known-sentinel %s 127.0.0.1 %d %s", m, p, ids[j]))
		}
	}
	return d
}

// sentinelID returns a random sentinel run ID: 40 hex digits.
func sentinelID() string {
	b := make([]byte, 20)
	_, _ = rand.Read(b) // never fails
	return hex.EncodeToString(b)
}

// URL returns the sentinels as a URL that redis.ParseFailoverURL reads:
//
//	redis://127.0.0.1:S1/0?master_name=lockapi&addr=127.0.0.1:S2&addr=127.0.0.1:S3
//
// The host is the first sentinel, each further one is an addr parameter, and
// the path is the database number.
func (s *Sentinel) URL() string {
	// Built by hand: url.Values.Encode would escape the colons, which is
	// legal but not the form people write in LOCKAPI_REDIS_URL.
	var b strings.Builder
	b.WriteString("redis://" + s.SentinelAddrs[0] + "/0?master_name=" + url.QueryEscape(SentinelMaster))
	for _, a := range s.SentinelAddrs[1:] {
		b.WriteString("&addr=" + a)
	}
	return b.String()
}

// Client returns a go-redis failover client built from URL, closed when tb
// ends: what the lock service itself would use.
func (s *Sentinel) Client(tb testing.TB) *redis.Client {
	tb.Helper()
	opt, err := redis.ParseFailoverURL(s.URL())
	if err != nil {
		tb.Fatalf("redistest: parse %q: %v", s.URL(), err)
	}
	c := redis.NewFailoverClient(opt)
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// Nodes returns the data nodes (not the sentinels) in start order: the
// first started as master. Use Master and Replicas for current roles.
func (s *Sentinel) Nodes() []*Node { return append([]*Node(nil), s.data...) }

// SentinelNodes returns the sentinel processes, in the order of
// SentinelAddrs, for tests that kill or pause a sentinel.
func (s *Sentinel) SentinelNodes() []*Node { return append([]*Node(nil), s.sentinels...) }

// Master returns the node the sentinels currently name as master (SENTINEL
// GET-MASTER-ADDR-BY-NAME on the first sentinel that answers). That is what
// clients are told; during a failover a node may still act as master after
// the sentinels have moved on.
func (s *Sentinel) Master(tb testing.TB) *Node {
	tb.Helper()
	var errs []error
	for i, sc := range s.sc {
		if !s.sentinels[i].live() {
			continue
		}
		addr, err := masterAddr(sc)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		n := s.node(addr)
		if n == nil {
			tb.Fatalf("redistest: sentinel %s names master %s, which is not a node of this Sentinel", s.sentinels[i].addr, addr)
		}
		return n
	}
	tb.Fatalf("redistest: no sentinel names a master: %v", errors.Join(errs...))
	return nil
}

// Replicas returns the data nodes other than Master, running or not.
func (s *Sentinel) Replicas(tb testing.TB) []*Node {
	tb.Helper()
	m := s.Master(tb)
	var r []*Node
	for _, n := range s.data {
		if n != m {
			r = append(r, n)
		}
	}
	return r
}

// Failover runs SENTINEL FAILOVER, a failover without agreement from other
// sentinels, and waits until every running sentinel names a new master that
// reports role master. It returns the old and the new master.
//
// Like a real failover it does not touch the old master: if it runs, it
// keeps acting as master, accepting writes no replica will see, until a
// sentinel converts it to a replica about 10 s later (SENTINEL_PUBLISH_PERIOD
// ×4 plus an INFO period). WaitHealthy waits for that. A second Failover
// retries while no replica qualifies, so it may take that long.
func (s *Sentinel) Failover(tb testing.TB) (old, new *Node) {
	tb.Helper()
	old = s.Master(tb)
	start := time.Now()
	err := waitFor(failoverWait, func() error {
		var errs []error
		for i, sc := range s.sc {
			if !s.sentinels[i].live() {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			err := sc.Failover(ctx, SentinelMaster).Err()
			cancel()
			// INPROG: a failover already runs, which is what we asked for.
			if err == nil || strings.HasPrefix(err.Error(), "INPROG") {
				return nil
			}
			// NOGOODSLAVE: no replica qualifies yet, typically the
			// old master of a previous failover not yet converted.
			errs = append(errs, fmt.Errorf("%s: %w", s.sentinels[i].addr, err))
		}
		return fmt.Errorf("SENTINEL FAILOVER: %w", errors.Join(errs...))
	})
	if err != nil {
		tb.Fatalf("redistest: %v%s", err, logTails(s.all()))
	}
	new = s.WaitMasterChange(tb, old.addr)
	tb.Logf("redistest: Sentinel failover %s -> %s took %v", old.addr, new.addr, time.Since(start).Round(time.Millisecond))
	return old, new
}

// WaitMasterChange waits until every running sentinel names the same master,
// other than old (host:port), and that node reports role master; then it
// returns that node. It is how a test waits for the automatic failover after
// killing or pausing the master. It fails the test after 20 s.
func (s *Sentinel) WaitMasterChange(tb testing.TB, old string) *Node {
	tb.Helper()
	var got *Node
	err := waitFor(failoverWait, func() error {
		addr, err := s.agreedMaster()
		if err != nil {
			return err
		}
		if addr == old {
			return fmt.Errorf("sentinels still name %s", old)
		}
		n := s.node(addr)
		if n == nil {
			return fmt.Errorf("sentinels name %s, which is not a node of this Sentinel", addr)
		}
		if !n.live() {
			return fmt.Errorf("sentinels name %s, which is not running", addr)
		}
		if err := n.isMaster(); err != nil {
			return err
		}
		got = n
		return nil
	})
	if err != nil {
		tb.Fatalf("redistest: master did not change from %s: %v%s", old, err, logTails(s.all()))
	}
	return got
}

// WaitHealthy waits until the deployment is whole again: all running
// sentinels agree on a master, every other running data node replicates it
// with a live link, and every running sentinel knows those replicas and the
// other running sentinels. After a failover this includes the old master
// being converted to a replica, which sentinels do only after about 10 s.
func (s *Sentinel) WaitHealthy(tb testing.TB) {
	tb.Helper()
	start := time.Now()
	err := waitFor(settleTimeout, func() error {
		addr, err := s.agreedMaster()
		if err != nil {
			return err
		}
		return s.healthy(addr)
	})
	if err != nil {
		tb.Fatalf("redistest: Sentinel not healthy: %v%s", err, logTails(s.all()))
	}
	tb.Logf("redistest: Sentinel healthy after %v", time.Since(start).Round(time.Millisecond))
}

// healthy returns why the deployment is not yet whole around master, or nil.
func (s *Sentinel) healthy(master string) error {
	m := s.node(master)
	if m == nil || !m.live() {
		return fmt.Errorf("master %s is not a running node", master)
	}
	if err := m.isMaster(); err != nil {
		return err
	}
	var replicas []*Node
	for _, n := range s.data {
		if n != m && n.live() {
			if err := n.replicaOf(master); err != nil {
				return err
			}
			replicas = append(replicas, n)
		}
	}

	for i, sc := range s.sc {
		me := s.sentinels[i]
		if !me.live() {
			continue
		}
		got, err := masterAddr(sc)
		if err != nil {
			return err
		}
		if got != master {
			return fmt.Errorf("sentinel %s names master %s, want %s", me.addr, got, master)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		peers, err := sc.Sentinels(ctx, SentinelMaster).Result()
		if err != nil {
			cancel()
			return fmt.Errorf("SENTINEL SENTINELS on %s: %w", me.addr, err)
		}
		reps, err := sc.Replicas(ctx, SentinelMaster).Result()
		cancel()
		if err != nil {
			return fmt.Errorf("SENTINEL REPLICAS on %s: %w", me.addr, err)
		}
		for _, other := range s.sentinels {
			if other == me || !other.live() {
				continue
			}
			if !slices.ContainsFunc(peers, func(p map[string]string) bool {
				return net.JoinHostPort(p["ip"], p["port"]) == other.addr && p["flags"] == "sentinel"
			}) {
				return fmt.Errorf("sentinel %s does not (yet) see sentinel %s up", me.addr, other.addr)
			}
		}
		for _, r := range replicas {
			if !slices.ContainsFunc(reps, func(p map[string]string) bool {
				return p["name"] == r.addr && p["flags"] == "slave" && selectable(p)
			}) {
				return fmt.Errorf("sentinel %s does not (yet) see replica %s up", me.addr, r.addr)
			}
		}
	}
	return nil
}

// selectable reports whether a sentinel has recent enough INFO from a
// replica to promote it: SENTINEL FAILOVER skips a replica whose last INFO is
// older than three INFO periods (30 s), which includes one never asked.
//
// The replication fields of SENTINEL REPLICAS (master-link-status,
// master-host) are not checked: they are only as fresh as the last INFO,
// which a sentinel sends a replica every 10 s, so after a failover they lag
// by that much. Whether a replica is in sync is asked of the replica itself.
func selectable(replica map[string]string) bool {
	ms, err := strconv.ParseInt(replica["info-refresh"], 10, 64)
	return err == nil && ms < 30000
}

// agreedMaster returns the master every running sentinel names, or an
// error while they disagree.
func (s *Sentinel) agreedMaster() (string, error) {
	agreed := ""
	for i, sc := range s.sc {
		if !s.sentinels[i].live() {
			continue
		}
		addr, err := masterAddr(sc)
		if err != nil {
			return "", err
		}
		if agreed != "" && addr != agreed {
			return "", fmt.Errorf("sentinels disagree: %s and %s", agreed, addr)
		}
		agreed = addr
	}
	if agreed == "" {
		return "", errors.New("no sentinel is running")
	}
	return agreed, nil
}

// masterAddr asks one sentinel for the master's host:port.
func masterAddr(sc *redis.SentinelClient) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	hp, err := sc.GetMasterAddrByName(ctx, SentinelMaster).Result()
	if err != nil {
		return "", fmt.Errorf("SENTINEL GET-MASTER-ADDR-BY-NAME: %w", err)
	}
	if len(hp) != 2 {
		return "", fmt.Errorf("SENTINEL GET-MASTER-ADDR-BY-NAME = %q", hp)
	}
	return net.JoinHostPort(hp[0], hp[1]), nil
}

// node returns the data node at addr, or nil.
func (s *Sentinel) node(addr string) *Node {
	for _, n := range s.data {
		if n.addr == addr {
			return n
		}
	}
	return nil
}

func (s *Sentinel) all() []*Node { return append(s.Nodes(), s.sentinels...) }
