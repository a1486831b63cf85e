package redistest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// The topology tests run in parallel: each starts its own processes on its
// own ports, and most of their time is spent waiting for Redis timers.

func TestSentinel_replicates_and_fails_over(t *testing.T) {
	t.Parallel()
	s := StartSentinel(t)
	ctx := context.Background()

	opt, err := redis.ParseFailoverURL(s.URL())
	if err != nil {
		t.Fatalf("ParseFailoverURL(%q): %v", s.URL(), err)
	}
	if opt.MasterName != SentinelMaster || !slices.Equal(opt.SentinelAddrs, s.SentinelAddrs) || opt.DB != 0 {
		t.Fatalf("ParseFailoverURL(%q) = master %q, sentinels %v, db %d; want %q, %v, 0",
			s.URL(), opt.MasterName, opt.SentinelAddrs, opt.DB, SentinelMaster, s.SentinelAddrs)
	}

	master := s.Master(t)
	if master != s.Nodes()[0] {
		t.Fatalf("Master = %s, want the first node %s", master, s.Nodes()[0])
	}
	replicas := s.Replicas(t)
	if len(replicas) != 1 || replicas[0] != s.Nodes()[1] {
		t.Fatalf("Replicas = %v, want [%s]", replicas, s.Nodes()[1])
	}
	mc := master.Client(t)
	if err := mc.Set(ctx, "k", "v1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	// WAIT makes the read on the replica deterministic.
	if n, err := mc.Wait(ctx, 1, 2*time.Second).Result(); err != nil || n != 1 {
		t.Fatalf("WAIT 1 = %d, %v; want 1", n, err)
	}
	if got, err := replicas[0].Client(t).Get(ctx, "k").Result(); err != nil || got != "v1" {
		t.Fatalf("GET k on replica = %q, %v; want v1", got, err)
	}

	// The failover client finds the master through the sentinels.
	fc := s.Client(t)
	if got, err := fc.Get(ctx, "k").Result(); err != nil || got != "v1" {
		t.Fatalf("GET k through %s = %q, %v; want v1", s.URL(), got, err)
	}

	start := time.Now()
	old, nw := s.Failover(t)
	t.Logf("Failover took %v", time.Since(start))
	if old != master || nw != replicas[0] {
		t.Fatalf("Failover = %s -> %s, want %s -> %s", old, nw, master, replicas[0])
	}
	if got := s.Master(t); got != nw {
		t.Fatalf("Master after Failover = %s, want %s", got, nw)
	}
	if got, err := nw.Client(t).Get(ctx, "k").Result(); err != nil || got != "v1" {
		t.Fatalf("GET k on new master = %q, %v; want v1", got, err)
	}
	// A fresh failover client writes to the new master.
	if err := s.Client(t).Set(ctx, "k", "v2", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if got, err := nw.Client(t).Get(ctx, "k").Result(); err != nil || got != "v2" {
		t.Fatalf("GET k on new master after a write through the URL = %q, %v; want v2", got, err)
	}
}

func TestSentinel_kill_master(t *testing.T) {
	t.Parallel()
	s := StartSentinel(t)
	old := s.Master(t)
	old.Kill(t)
	if old.PID() != 0 {
		t.Fatalf("PID after Kill = %d, want 0", old.PID())
	}

	start := time.Now()
	nw := s.WaitMasterChange(t, old.Addr())
	t.Logf("automatic failover after kill -9 took %v", time.Since(start))
	if nw == old {
		t.Fatalf("WaitMasterChange returned the killed master %s", old)
	}

	// The old master comes back as itself, still claiming master until the
	// sentinels convert it into a replica of the new one.
	old.Restart(t, false)
	s.WaitHealthy(t)
	if got := s.Replicas(t); len(got) != 1 || got[0] != old {
		t.Fatalf("Replicas after restart = %v, want [%s]%s", got, old, logTails(s.all()))
	}
}

func TestCluster(t *testing.T) {
	t.Parallel()
	c := StartCluster(t)
	ctx := context.Background()

	opt, err := redis.ParseClusterURL(c.URL())
	if err != nil {
		t.Fatalf("ParseClusterURL(%q): %v", c.URL(), err)
	}
	if !slices.Equal(opt.Addrs, c.Seeds) {
		t.Fatalf("ParseClusterURL(%q).Addrs = %v, want %v", c.URL(), opt.Addrs, c.Seeds)
	}

	masters, replicas := c.Masters(t), c.Replicas(t)
	if len(masters) != 3 || len(replicas) != 3 {
		t.Fatalf("Masters = %v, Replicas = %v; want 3 each", masters, replicas)
	}
	for _, m := range masters {
		if r := c.ReplicaOf(t, m); slices.Contains(masters, r) {
			t.Fatalf("ReplicaOf(%s) = master %s", m, r)
		}
	}

	// Keys land on every master, and the client follows them there.
	cc := c.Client(t)
	seen := make(map[*Node]bool)
	for i := range 30 {
		k := fmt.Sprintf("key-%d", i)
		if err := cc.Set(ctx, k, i, 0).Err(); err != nil {
			t.Fatalf("SET %s: %v", k, err)
		}
		m := c.MasterForKey(t, k)
		seen[m] = true
		if got, err := m.Client(t).Get(ctx, k).Int(); err != nil || got != i {
			t.Fatalf("GET %s on its master %s = %d, %v; want %d", k, m, got, err, i)
		}
	}
	if len(seen) != 3 {
		t.Fatalf("30 keys landed on %d masters, want 3", len(seen))
	}

	t.Run("FailoverReplicaOf", func(t *testing.T) {
		m := c.MasterForKey(t, "a")
		r := c.ReplicaOf(t, m)
		if err := cc.Set(ctx, "a", "1", 0).Err(); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		got := c.FailoverReplicaOf(t, m)
		t.Logf("manual cluster failover took %v", time.Since(start))
		if got != r {
			t.Fatalf("FailoverReplicaOf(%s) = %s, want its replica %s", m, got, r)
		}
		if owner := c.MasterForKey(t, "a"); owner != r {
			t.Fatalf("MasterForKey(a) = %s, want %s", owner, r)
		}
		if back := c.ReplicaOf(t, r); back != m {
			t.Fatalf("ReplicaOf(new master) = %s, want the old master %s", back, m)
		}
		if v, err := cc.Get(ctx, "a").Result(); err != nil || v != "1" {
			t.Fatalf("GET a after failover = %q, %v; want 1", v, err)
		}
	})

	t.Run("kill_master", func(t *testing.T) {
		dead := c.MasterForKey(t, "b")
		if err := cc.Set(ctx, "b", "1", 0).Err(); err != nil {
			t.Fatal(err)
		}
		if n, err := dead.Client(t).Wait(ctx, 1, 2*time.Second).Result(); err != nil || n != 1 {
			t.Fatalf("WAIT 1 = %d, %v; want 1", n, err)
		}
		dead.Kill(t)
		start := time.Now()
		r := c.WaitPromoted(t, dead)
		t.Logf("automatic cluster failover after kill -9 took %v", time.Since(start))
		if r == dead {
			t.Fatalf("WaitPromoted returned the dead master")
		}
		if owner := c.MasterForKey(t, "b"); owner != r {
			t.Fatalf("MasterForKey(b) = %s, want %s", owner, r)
		}
		if v, err := r.Client(t).Get(ctx, "b").Result(); err != nil || v != "1" {
			t.Fatalf("GET b on %s after failover = %q, %v; want 1", r, v, err)
		}
		// go-redis keeps sending the dead master's slots to it until it
		// reloads its slot map (see WaitPromoted); ReloadState is async.
		cc.ReloadState(ctx)
		err := waitFor(5*time.Second, func() error { return cc.Get(ctx, "b").Err() })
		if err != nil {
			t.Fatalf("GET b through the cluster client after ReloadState: %v", err)
		}

		// Restarted from its nodes.conf, the dead master rejoins as a
		// replica of the node that took over.
		dead.Restart(t, false)
		c.WaitHealthy(t)
		if got := c.ReplicaOf(t, r); got != dead {
			t.Fatalf("ReplicaOf(%s) after restart = %s, want %s", r, got, dead)
		}
	})
}

func TestCluster_AOF_restart_and_pause(t *testing.T) {
	t.Parallel()
	c := StartCluster(t, WithAOF())
	ctx := context.Background()
	cc := c.Client(t)
	if err := cc.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}

	// A master restarted from its AOF has its data back at once, before its
	// replica could resend it. The restart is far quicker than the node
	// timeout, so the master keeps its slots.
	m := c.MasterForKey(t, "k")
	m.Restart(t, true)
	// DBSIZE has no key, so a restarted master answers it during the 2 s it
	// waits before serving its slots again (CLUSTER_WRITABLE_DELAY).
	if n, err := m.Client(t).DBSize(ctx).Result(); err != nil || n != 1 {
		t.Fatalf("DBSIZE on %s right after Restart(aof=true) = %d, %v; want 1", m, n, err)
	}
	c.WaitHealthy(t)
	conn := m.Client(t).Conn()
	defer conn.Close()
	if err := conn.ReadOnly(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if got, err := conn.Get(ctx, "k").Result(); err != nil || got != "v" {
		t.Fatalf("GET k on %s after Restart(aof=true) = %q, %v; want v", m, got, err)
	}

	// A SIGSTOPped master is failed over like a dead one; woken up, it
	// learns it lost its slots and follows the node that took over.
	m = c.MasterForKey(t, "k")
	m.Pause(t)
	start := time.Now()
	r := c.WaitPromoted(t, m)
	t.Logf("automatic cluster failover after SIGSTOP took %v", time.Since(start))
	if got, err := r.Client(t).Get(ctx, "k").Result(); err != nil || got != "v" {
		t.Fatalf("GET k on %s after failover = %q, %v; want v", r, got, err)
	}
	m.Continue(t)
	c.WaitHealthy(t)
	if got := c.ReplicaOf(t, r); got != m {
		t.Fatalf("ReplicaOf(%s) after Continue = %s, want %s", r, got, m)
	}
}

func TestNode_Pause_Continue(t *testing.T) {
	t.Parallel()
	n := Start(t).Node(t)
	c := redis.NewClient(&redis.Options{Addr: n.Addr(), MaxRetries: -1, ReadTimeout: 200 * time.Millisecond})
	defer c.Close()
	ctx := context.Background()

	n.Pause(t)
	if err := c.Ping(ctx).Err(); err == nil {
		t.Fatal("PING answered while the server is SIGSTOPped")
	}
	n.Continue(t)
	if err := waitFor(2*time.Second, func() error { return c.Ping(ctx).Err() }); err != nil {
		t.Fatalf("PING after Continue: %v", err)
	}
}

func TestNode_ClientPause(t *testing.T) {
	t.Parallel()
	n := Start(t).Node(t)
	c := n.Client(t)
	ctx := context.Background()

	const d = 300 * time.Millisecond
	n.ClientPause(t, d, PauseWrite)
	start := time.Now()
	if err := c.Get(ctx, "k").Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("GET during a write pause: %v", err)
	}
	if el := time.Since(start); el > d/2 {
		t.Errorf("GET during a write pause took %v", el)
	}
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el < d*2/3 {
		t.Errorf("SET during a %v write pause returned after %v", d, el)
	}
}

func TestNode_Restart_AOF(t *testing.T) {
	t.Parallel()
	s := StartAOF(t)
	ctx := context.Background()
	c := s.Client(t)
	if got, err := c.ConfigGet(ctx, "appendonly").Result(); err != nil || got["appendonly"] != "yes" {
		t.Fatalf("CONFIG GET appendonly = %v, %v; want yes", got, err)
	}
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}

	n := s.Node(t)
	pid := n.PID()
	n.Restart(t, true)
	if n.PID() == pid || n.PID() == 0 {
		t.Fatalf("PID after Restart = %d, was %d", n.PID(), pid)
	}
	if got, err := c.Get(ctx, "k").Result(); err != nil || got != "v" {
		t.Fatalf("GET after Restart(aof=true) = %q, %v; want v", got, err)
	}

	// Stop and Resume of a StartAOF server keep data too.
	s.Restart(t)
	if got, err := c.Get(ctx, "k").Result(); err != nil || got != "v" {
		t.Fatalf("GET after Server.Restart = %q, %v; want v", got, err)
	}

	n.Restart(t, false)
	if err := c.Get(ctx, "k").Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("GET after Restart(aof=false): err = %v, want redis.Nil", err)
	}
	if _, err := os.Stat(filepath.Join(n.dir, "appendonlydir")); err != nil {
		t.Errorf("AOF directory after Restart(aof=false): %v; want it recreated", err)
	}
}

func TestNode_Restart_without_AOF_loses_data(t *testing.T) {
	t.Parallel()
	s := Start(t)
	n := s.Node(t)
	ctx := context.Background()
	c := s.Client(t)
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	n.Restart(t, false)
	if err := c.Get(ctx, "k").Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("GET after Restart(aof=false): err = %v, want redis.Nil", err)
	}
}

func TestParseClusterNodes(t *testing.T) {
	const text = `425e 127.0.0.1:23106@33106 slave a796 0 1795445697773 2 connected
f248 127.0.0.1:23101@33101 myself,master - 0 1795445697000 1 connected 0-5460 7000 [5461->-a796]
a796 127.0.0.1:23102@33102 master,fail? - 0 1795445697773 2 connected 5461-10922
`
	got := parseClusterNodes(text)
	want := map[string]clusterEntry{
		"425e": {id: "425e", addr: "127.0.0.1:23106", masterID: "a796"},
		"f248": {id: "f248", addr: "127.0.0.1:23101", master: true, slots: [][2]int{{0, 5460}, {7000, 7000}}},
		"a796": {id: "a796", addr: "127.0.0.1:23102", master: true, failed: true, slots: [][2]int{{5461, 10922}}},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d entries, want %d: %+v", len(got), len(want), got)
	}
	for id, w := range want {
		g := got[id]
		if g.id != w.id || g.addr != w.addr || g.master != w.master || g.masterID != w.masterID ||
			g.failed != w.failed || !slices.Equal(g.slots, w.slots) {
			t.Errorf("entry %s = %+v, want %+v", id, g, w)
		}
	}
}
