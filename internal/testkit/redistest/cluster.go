package redistest

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	// clusterSlots is the fixed number of hash slots of a Redis Cluster.
	clusterSlots = 16384
	// clusterMasters is how many shards StartCluster creates, each a master
	// with one replica: three masters are the fewest that can still elect a
	// replica when one master dies (a majority of masters must vote).
	clusterMasters = 3
	// nodeTimeout is cluster-node-timeout: how long a node may be silent
	// before it is suspected. Far below the 15 s default so failovers in
	// tests take about 2 s.
	nodeTimeout = 1000 * time.Millisecond
	// promoteTimeout bounds the wait for a replica to take over its master.
	promoteTimeout = 15 * time.Second
	// createTimeout bounds redis-cli --cluster create, which sleeps in
	// whole seconds while it waits for the nodes to meet.
	createTimeout = 30 * time.Second
)

// Cluster is a Redis Cluster for one test: three masters with one replica
// each, six redis-server processes on loopback ports, each in its own
// directory. It is the smallest cluster in which a master can fail and be
// replaced by its replica.
type Cluster struct {
	// Seeds are the nodes' host:port addresses, any of which a cluster
	// client can start from.
	Seeds []string

	nodes []*Node

	mu sync.Mutex
	// lastReplica maps a master's node ID to the replica last seen
	// replicating it. Once a replica took over, no node lists the dead
	// master's replica any more, yet WaitPromoted must know whom to wait for.
	lastReplica map[string]string
}

// StartCluster starts a Cluster that lives until the end of tb, created with
// redis-cli --cluster create, and returns once it serves every slot: all
// nodes report cluster_state:ok with all 16384 slots covered, all agree on
// three masters each with one replica, and every replica is in sync.
//
// It needs redis-server and redis-cli in PATH; without them the test is
// skipped, or fails when CI is set.
func StartCluster(tb testing.TB, opts ...Option) *Cluster {
	tb.Helper()
	bins := lookBins(tb, "StartCluster", "redis-server", "redis-cli")
	bin, cli := bins[0], bins[1]
	o := applyOptions(opts)
	base := tb.TempDir()
	start := time.Now()
	c := &Cluster{lastReplica: make(map[string]string)}

	for i := range 2 * clusterMasters {
		dir := filepath.Join(base, fmt.Sprintf("node%d", i+1))
		n, err := startNode(tb, nodeSpec{
			bin: bin, dir: dir, aof: o.aof, bus: true,
			args: func(port int) ([]string, error) {
				conf := filepath.Join(dir, "redis.conf")
				return []string{conf}, writeConf(conf, clusterDirectives(port, dir, o.aof)...)
			},
		})
		if err != nil {
			tb.Fatalf("redistest: start cluster node: %v", err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		n.id, err = n.ctl.ClusterMyID(ctx).Result()
		cancel()
		if err != nil {
			tb.Fatalf("redistest: CLUSTER MYID on %s: %v", n.addr, err)
		}
		c.nodes = append(c.nodes, n)
		c.Seeds = append(c.Seeds, n.addr)
	}

	ctx, cancel := context.WithTimeout(context.Background(), createTimeout)
	defer cancel()
	args := append([]string{"--cluster", "create"}, c.Seeds...)
	args = append(args, "--cluster-replicas", "1", "--cluster-yes")
	cmd := exec.CommandContext(ctx, cli, args...)
	cmd.WaitDelay = time.Second
	if out, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("redistest: redis-cli %s: %v\n%s%s", strings.Join(args, " "), err, out, logTails(c.nodes))
	}

	err := waitFor(settleTimeout, func() error {
		views, err := c.healthy()
		if err != nil {
			return err
		}
		return formed(views[0])
	})
	if err != nil {
		tb.Fatalf("redistest: cluster not formed: %v%s", err, logTails(c.nodes))
	}
	tb.Logf("redistest: Cluster %v ready in %v", c.Seeds, time.Since(start).Round(time.Millisecond))
	return c
}

// clusterDirectives is the redis.conf of a cluster node. The node's view of
// the cluster lives in nodes-PORT.conf next to it, so a restarted node
// rejoins as itself. A replica may always fail over (validity factor 0), as
// tests kill masters right after writing; and replicas stay with their
// master, so the shard layout only changes when a test changes it.
func clusterDirectives(port int, dir string, aof bool) []string {
	return append(dataDirectives(port, dir, aof),
		"cluster-enabled yes",
		"cluster-config-file "+strconv.Quote(filepath.Join(dir, fmt.Sprintf("nodes-%d.conf", port))),
		"cluster-node-timeout "+strconv.FormatInt(nodeTimeout.Milliseconds(), 10),
		"cluster-replica-validity-factor 0",
		"cluster-allow-replica-migration no",
	)
}

// URL returns the nodes as a URL that redis.ParseClusterURL reads:
//
//	redis://127.0.0.1:P1?addr=127.0.0.1:P2&addr=127.0.0.1:P3...
//
// The host is the first seed and each further seed is an addr parameter.
// There is no database path: a cluster has only database 0.
func (c *Cluster) URL() string {
	var b strings.Builder
	b.WriteString("redis://" + c.Seeds[0])
	for i, a := range c.Seeds[1:] {
		if i == 0 {
			b.WriteString("?addr=" + a)
		} else {
			b.WriteString("&addr=" + a)
		}
	}
	return b.String()
}

// Client returns a go-redis cluster client built from URL, closed when tb
// ends: what the lock service itself would use.
func (c *Cluster) Client(tb testing.TB) *redis.ClusterClient {
	tb.Helper()
	opt, err := redis.ParseClusterURL(c.URL())
	if err != nil {
		tb.Fatalf("redistest: parse %q: %v", c.URL(), err)
	}
	cc := redis.NewClusterClient(opt)
	tb.Cleanup(func() { _ = cc.Close() })
	return cc
}

// Nodes returns all six nodes in start order, whatever their role now.
func (c *Cluster) Nodes() []*Node { return append([]*Node(nil), c.nodes...) }

// Masters returns the nodes that own slots, in slot order, as the first
// running node sees the cluster now.
func (c *Cluster) Masters(tb testing.TB) []*Node {
	tb.Helper()
	v := c.mustView(tb)
	var ms []clusterEntry
	for _, e := range v.entries {
		if e.master && !e.failed && len(e.slots) > 0 {
			ms = append(ms, e)
		}
	}
	slices.SortFunc(ms, func(a, b clusterEntry) int { return a.slots[0][0] - b.slots[0][0] })
	nodes := make([]*Node, len(ms))
	for i, e := range ms {
		nodes[i] = c.mustNode(tb, e.id)
	}
	return nodes
}

// Replicas returns the nodes the first running node sees as replicas that
// have not failed, in start order.
func (c *Cluster) Replicas(tb testing.TB) []*Node {
	tb.Helper()
	v := c.mustView(tb)
	var rs []*Node
	for _, n := range c.nodes {
		if e, ok := v.entries[n.id]; ok && !e.master && !e.failed {
			rs = append(rs, n)
		}
	}
	return rs
}

// ReplicaOf returns master's replica: the node some running node lists as
// replicating master, or, once none does because the replica took over, the
// replica last seen replicating it.
func (c *Cluster) ReplicaOf(tb testing.TB, master *Node) *Node {
	tb.Helper()
	views, _ := c.views() // a partial answer still refreshes lastReplica
	for _, v := range views {
		for _, e := range v.entries {
			if e.masterID == master.id && !e.failed {
				return c.mustNode(tb, e.id)
			}
		}
	}
	c.mu.Lock()
	id, ok := c.lastReplica[master.id]
	c.mu.Unlock()
	if !ok {
		tb.Fatalf("redistest: no replica of %s known", master.addr)
	}
	return c.mustNode(tb, id)
}

// MasterForSlot returns the node that owns slot, as the first running node
// sees the cluster now.
func (c *Cluster) MasterForSlot(tb testing.TB, slot int) *Node {
	tb.Helper()
	v := c.mustView(tb)
	for _, e := range v.entries {
		if e.master && e.owns(slot) {
			return c.mustNode(tb, e.id)
		}
	}
	tb.Fatalf("redistest: %s sees no owner of slot %d", v.from.addr, slot)
	return nil
}

// MasterForKey returns the node that owns key's slot (CLUSTER KEYSLOT), so a
// test can kill or pause exactly the master holding a lock.
func (c *Cluster) MasterForKey(tb testing.TB, key string) *Node {
	tb.Helper()
	n := c.firstLive(tb)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	slot, err := n.ctl.ClusterKeySlot(ctx, key).Result()
	if err != nil {
		tb.Fatalf("redistest: CLUSTER KEYSLOT %q on %s: %v", key, n.addr, err)
	}
	return c.MasterForSlot(tb, int(slot))
}

// FailoverReplicaOf runs CLUSTER FAILOVER on master's replica and returns it
// once it is master: it reports role master, every running node agrees it
// owns the slots, and the cluster is healthy again (see WaitHealthy), which
// includes a running old master now replicating it. With master running the
// failover is the coordinated kind, which loses no acknowledged write; with
// master killed or paused it is FORCE, without master's consent.
func (c *Cluster) FailoverReplicaOf(tb testing.TB, master *Node) *Node {
	tb.Helper()
	r := c.ReplicaOf(tb, master)
	args := []any{"CLUSTER", "FAILOVER"}
	if !master.live() {
		args = append(args, "FORCE")
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := r.ctl.Do(ctx, args...).Err(); err != nil {
		tb.Fatalf("redistest: %v on %s: %v", args, r.addr, err)
	}
	c.waitPromoted(tb, master, r)
	tb.Logf("redistest: Cluster failover %s -> %s took %v", master.addr, r.addr, time.Since(start).Round(time.Millisecond))
	return r
}

// WaitPromoted waits until dead's replica has taken over after dead was
// killed or paused, and returns it. The cluster decides that on its own:
// dead is suspected after cluster-node-timeout (1 s), then its replica wins
// an election. It fails the test after 15 s.
//
// A go-redis ClusterClient does not notice by itself: it keeps sending the
// dead master's slots to the dead address until it reloads its slot map,
// which only a MOVED reply or ClusterStateReloadInterval (60 s by default)
// triggers. Call its ReloadState (asynchronous) to model a client that
// reloads on errors.
func (c *Cluster) WaitPromoted(tb testing.TB, dead *Node) *Node {
	tb.Helper()
	start := time.Now()
	r := c.ReplicaOf(tb, dead)
	c.waitPromoted(tb, dead, r)
	tb.Logf("redistest: Cluster replica %s took over from %s after %v", r.addr, dead.addr, time.Since(start).Round(time.Millisecond))
	return r
}

func (c *Cluster) waitPromoted(tb testing.TB, old, r *Node) {
	tb.Helper()
	err := waitFor(promoteTimeout, func() error {
		if !r.live() {
			return fmt.Errorf("replica %s is not running", r.addr)
		}
		if err := r.isMaster(); err != nil {
			return err
		}
		views, err := c.healthy()
		if err != nil {
			return err
		}
		for _, v := range views {
			if e := v.entries[r.id]; !e.master || len(e.slots) == 0 {
				return fmt.Errorf("%s does not (yet) see %s as a master with slots", v.from.addr, r.addr)
			}
		}
		return nil
	})
	if err != nil {
		tb.Fatalf("redistest: %s did not take over from %s: %v%s", r.addr, old.addr, err, logTails(c.nodes))
	}
}

// WaitHealthy waits until the running nodes have settled, for example after
// a Restart: every one reports cluster_state:ok with all slots covered, all
// agree on who owns each slot and on each other's roles, no running node is
// marked failing, and every running replica's link to its master is up.
func (c *Cluster) WaitHealthy(tb testing.TB) {
	tb.Helper()
	start := time.Now()
	if err := waitFor(settleTimeout, func() error { _, err := c.healthy(); return err }); err != nil {
		tb.Fatalf("redistest: cluster not healthy: %v%s", err, logTails(c.nodes))
	}
	tb.Logf("redistest: Cluster healthy after %v", time.Since(start).Round(time.Millisecond))
}

// healthy returns the running nodes' views when they agree as WaitHealthy
// describes, or why not.
func (c *Cluster) healthy() ([]clusterView, error) {
	views, err := c.views()
	if err != nil {
		return nil, err
	}
	if len(views) == 0 {
		return nil, errors.New("no cluster node is running")
	}
	var live []*Node
	for _, n := range c.nodes {
		if n.live() {
			live = append(live, n)
		}
	}
	ref := views[0]
	refOwners := ref.owners()
	for _, v := range views {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		info, err := v.from.ctl.ClusterInfo(ctx).Result()
		cancel()
		if err != nil {
			return nil, fmt.Errorf("CLUSTER INFO on %s: %w", v.from.addr, err)
		}
		f := infoFields(info)
		if f["cluster_state"] != "ok" || f["cluster_slots_ok"] != strconv.Itoa(clusterSlots) {
			return nil, fmt.Errorf("%s: cluster_state:%s cluster_slots_ok:%s", v.from.addr, f["cluster_state"], f["cluster_slots_ok"])
		}
		owners := v.owners()
		for slot, id := range owners {
			if id != refOwners[slot] {
				return nil, fmt.Errorf("slot %d: %s sees owner %s, %s sees %s", slot, v.from.addr, id, ref.from.addr, refOwners[slot])
			}
		}
		for _, n := range live {
			e, ok := v.entries[n.id]
			if !ok || e.failed {
				return nil, fmt.Errorf("%s sees running node %s as missing or failing", v.from.addr, n.addr)
			}
			own := c.viewOf(views, n).entries[n.id]
			if e.master != own.master || e.masterID != own.masterID {
				return nil, fmt.Errorf("%s and %s disagree on the role of %s", v.from.addr, n.addr, n.addr)
			}
		}
	}
	for slot, id := range refOwners {
		if n := c.node(id); n == nil || !n.live() {
			return nil, fmt.Errorf("slot %d is owned by %q, which is not a running node", slot, id)
		}
	}
	for _, v := range views {
		if e := v.entries[v.from.id]; !e.master {
			f, err := v.from.info("replication")
			if err != nil {
				return nil, err
			}
			if f["master_link_status"] != "up" {
				return nil, fmt.Errorf("replica %s: master_link_status %s", v.from.addr, f["master_link_status"])
			}
		}
	}
	return views, nil
}

// formed checks the layout StartCluster promises: three masters with slots,
// each with exactly one replica.
func formed(v clusterView) error {
	replicas := make(map[string]int)
	masters := 0
	for _, e := range v.entries {
		switch {
		case e.master && len(e.slots) > 0:
			masters++
		case !e.master:
			replicas[e.masterID]++
		}
	}
	if masters != clusterMasters {
		return fmt.Errorf("%s sees %d masters with slots, want %d", v.from.addr, masters, clusterMasters)
	}
	for _, e := range v.entries {
		if e.master && replicas[e.id] != 1 {
			return fmt.Errorf("%s sees %d replicas of %s, want 1", v.from.addr, replicas[e.id], e.addr)
		}
	}
	return nil
}

// clusterView is one node's CLUSTER NODES, by node ID.
type clusterView struct {
	from    *Node
	entries map[string]clusterEntry
}

// clusterEntry is one line of CLUSTER NODES.
type clusterEntry struct {
	id, addr string
	master   bool
	masterID string // "" for a master
	failed   bool   // fail or fail? (suspected)
	slots    [][2]int
}

func (e clusterEntry) owns(slot int) bool {
	for _, r := range e.slots {
		if r[0] <= slot && slot <= r[1] {
			return true
		}
	}
	return false
}

// owners returns each slot's owner ID; "" where v sees none.
func (v clusterView) owners() []string {
	o := make([]string, clusterSlots)
	for _, e := range v.entries {
		if !e.master {
			continue
		}
		for _, r := range e.slots {
			for s := r[0]; s <= r[1] && s < clusterSlots; s++ {
				o[s] = e.id
			}
		}
	}
	return o
}

// views returns the views of all running nodes. It also records which
// replica serves which master, for ReplicaOf.
func (c *Cluster) views() ([]clusterView, error) {
	var views []clusterView
	for _, n := range c.nodes {
		if !n.live() {
			continue
		}
		v, err := n.clusterView()
		if err != nil {
			return views, err
		}
		views = append(views, v)
		c.mu.Lock()
		for _, e := range v.entries {
			if !e.master && !e.failed && e.masterID != "" {
				c.lastReplica[e.masterID] = e.id
			}
		}
		c.mu.Unlock()
	}
	return views, nil
}

// clusterView asks n for CLUSTER NODES.
func (n *Node) clusterView() (clusterView, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	text, err := n.ctl.ClusterNodes(ctx).Result()
	if err != nil {
		return clusterView{}, fmt.Errorf("CLUSTER NODES on %s: %w", n.addr, err)
	}
	return clusterView{from: n, entries: parseClusterNodes(text)}, nil
}

// parseClusterNodes reads CLUSTER NODES output:
//
//	<id> <ip:port@cport> <flags> <master> <ping-sent> <pong-recv> <config-epoch> <link-state> <slot>...
//
// Slots being migrated ("[slot->-id]") are not owned yet and are skipped.
func parseClusterNodes(text string) map[string]clusterEntry {
	entries := make(map[string]clusterEntry)
	for line := range strings.Lines(text) {
		f := strings.Fields(line)
		if len(f) < 8 {
			continue
		}
		e := clusterEntry{id: f[0], addr: f[1]}
		if i := strings.IndexByte(e.addr, '@'); i >= 0 {
			e.addr = e.addr[:i]
		}
		for flag := range strings.SplitSeq(f[2], ",") {
			switch flag {
			case "master":
				e.master = true
			case "fail", "fail?":
				e.failed = true
			}
		}
		if f[3] != "-" {
			e.masterID = f[3]
		}
		for _, s := range f[8:] {
			if strings.HasPrefix(s, "[") {
				continue
			}
			lo, hi, isRange := strings.Cut(s, "-")
			a, err1 := strconv.Atoi(lo)
			b := a
			var err2 error
			if isRange {
				b, err2 = strconv.Atoi(hi)
			}
			if err1 == nil && err2 == nil {
				e.slots = append(e.slots, [2]int{a, b})
			}
		}
		entries[e.id] = e
	}
	return entries
}

// viewOf returns n's own view from views; n must be among them.
func (c *Cluster) viewOf(views []clusterView, n *Node) clusterView {
	for _, v := range views {
		if v.from == n {
			return v
		}
	}
	return clusterView{}
}

func (c *Cluster) node(id string) *Node {
	for _, n := range c.nodes {
		if n.id == id {
			return n
		}
	}
	return nil
}

func (c *Cluster) mustNode(tb testing.TB, id string) *Node {
	tb.Helper()
	n := c.node(id)
	if n == nil {
		tb.Fatalf("redistest: cluster node %s is not one of this Cluster's nodes", id)
	}
	return n
}

func (c *Cluster) firstLive(tb testing.TB) *Node {
	tb.Helper()
	for _, n := range c.nodes {
		if n.live() {
			return n
		}
	}
	tb.Fatal("redistest: no cluster node is running")
	return nil
}

func (c *Cluster) mustView(tb testing.TB) clusterView {
	tb.Helper()
	v, err := c.firstLive(tb).clusterView()
	if err != nil {
		tb.Fatalf("redistest: %v", err)
	}
	return v
}
