package tests

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockapi/lockapi/internal/testkit/linearize"
	"github.com/lockapi/lockapi/internal/testkit/redistest"
)

// Linearizability across faults: the random workload of
// TestLinearizability (shared and exclusive acquires, reentry, releases)
// runs against the real binary while one fault is injected mid-history,
// and the whole history, the fault's included, is checked against the
// model. What the answers during a fault may mean:
//
//   - a 5xx to an acquire: it may have granted, and lockapi undoes that
//     grant later (Output.Abandoned); a 5xx to a release may or may not
//     have taken effect (README: "an unconfirmed one answers 503, although
//     it took effect");
//   - no answer (lockapi died with the request in flight): it may or may
//     not have taken effect, and nothing undoes a grant it made;
//   - a refused connection (lockapi is down): the request never arrived,
//     and is not an operation.
//
// Leases take linearizeTTL (60 s), far beyond a run, so no lease expires:
// a grant the fault lost shows up as a lock that is free too early, never
// as an expiry.
//
// What a run checks, beyond the answers outside the fault: that every
// grant and release acknowledged before the fault still holds after it
// (who holds each name, with which token and how many holds), and that the
// answers during the fault are ones the store may give. What no run here
// checks: that a ghost grant is undone in the end (TestFaults looks for
// ghosts), or how long the fault lasts.

const (
	// faultLinOps is how many operations each phase of a fault run has at
	// least: before the fault, and after it is over.
	faultLinOps = 120
	// faultLinPace spaces a client's operations, so that a fault of a
	// second or two meets a few hundred of them, not thousands; after an
	// unanswered one a client waits faultLinBackoff, and after a 5xx its
	// Retry-After (faultPause).
	faultLinPace    = 2 * time.Millisecond
	faultLinBackoff = 100 * time.Millisecond
	// faultLinAfter bounds the run after the fault is over.
	faultLinAfter = 1500 * time.Millisecond
)

// linFault is one fault run: it starts its topology and returns lockapi's
// environment and the fault, which returns once the fault is over.
type linFault struct {
	name  string
	start func(t *testing.T) (env []string, inject func(t *testing.T, s *server))
}

// TestLinearizability_faults runs one history per fault; run one with
// -run 'Linearizability_faults/sentinel'.
func TestLinearizability_faults(t *testing.T) {
	if testing.Short() {
		t.Skip("fault runs start real topologies")
	}
	t.Parallel() // beside the fault suite: see TestFaults
	faults := []linFault{
		// Redis runs with appendonly yes and appendfsync always, so every
		// write it acknowledged survives kill -9: no grant may be lost.
		// Without AOF a restart loses every lease, which is no lock
		// service's promise (TestFaults measures that run).
		{name: "redis kill -9, restart with AOF", start: func(t *testing.T) ([]string, func(*testing.T, *server)) {
			srv := redistest.StartAOF(t)
			if !srv.CanRestart() {
				t.Skip("needs a redis-server this test runs")
			}
			return []string{"LOCKAPI_REDIS_URL=" + srv.URL}, func(t *testing.T, _ *server) {
				node := srv.Node(t)
				node.Kill(t)
				time.Sleep(300 * time.Millisecond)
				node.Restart(t, true) // same port and directory; returns once it answers PING
			}
		}},
		// With min_replicas 1 a grant, renewal or release is answered only
		// once the replica has it, so the promoted replica has every
		// acknowledged one. With one replica, the new master has none
		// until the old master rejoins (about 10 s), so acquires and
		// releases answer 503 for the rest of the run: it checks what
		// the failover kept, not that grants resume.
		{name: "sentinel: SENTINEL FAILOVER, min_replicas 1", start: func(t *testing.T) ([]string, func(*testing.T, *server)) {
			s := redistest.StartSentinel(t)
			// A 500 ms call deadline gives WAIT 250 ms, so that an
			// unconfirmed write answers quickly.
			env := []string{"LOCKAPI_REDIS_URL=" + s.URL(), "LOCKAPI_REDIS_MODE=sentinel", "LOCKAPI_MIN_REPLICAS=1",
				"LOCKAPI_REDIS_TIMEOUT=500ms"}
			return env, func(t *testing.T, _ *server) { s.Failover(t) }
		}},
		// Requests in flight when lockapi dies may or may not have taken
		// effect on Redis, and a grant among them is never undone: the
		// process that would undo it is gone.
		{name: "lockapi kill -9, restart", start: func(t *testing.T) ([]string, func(*testing.T, *server)) {
			return []string{"LOCKAPI_REDIS_URL=" + redistest.Start(t).URL}, func(t *testing.T, s *server) {
				s.killNow()
				s.start() // same address; returns once /healthz answers
			}
		}},
	}
	for _, f := range faults {
		t.Run(f.name, func(t *testing.T) {
			env, inject := f.start(t)
			s := startServer(t, env, "--log-level", "warn")
			c := newLinClient(s)
			for _, seed := range seeds(t, 1) {
				h := linearize.NewHistory()
				runFaultHistory(t, c, h, seed, func() { inject(t, s) })
				checkHistory(t, h, linearize.Strict, seed)
			}
		})
	}
}

// runFaultHistory runs the shared workload's clients, paced, and injects
// the fault once faultLinOps operations were made. The clients stop once
// faultLinOps more were made after the fault was over, or faultLinAfter
// after it; then they release what they hold.
//
// Beside them, a probe holds one lease across the fault, and another owner
// asks for its name once the clients are done: whether the workload's own
// leases meet the fault is chance, the probe's is not.
func runFaultHistory(t *testing.T, c *linClient, h *linearize.History, seed uint64, inject func()) {
	t.Helper()
	names := linNames(kindShared, seed+1000) // not the names of TestLinearizability's histories
	probeName, probeClient := fmt.Sprintf("lin-fault-probe-%d", seed), linearizeClients
	probe, ok, _ := c.acquire(t, h, probeClient, linearize.Input{Lock: probeName, Owner: "probe"})
	if !ok {
		t.Fatal("the probe's lease was not granted")
	}
	defer func() {
		c.acquire(t, h, probeClient, linearize.Input{Lock: probeName, Owner: "probe-other"})
		c.release(t, h, probeClient, probe, false)
	}()
	var ops atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for client := range linearizeClients {
		wg.Go(func() {
			w := newLinWorker(client, kindShared, names, seed)
			defer w.releaseAll(t, c, h)
			for {
				pause := faultPause(w.step(t, c, h))
				ops.Add(1)
				select {
				case <-stop:
					return
				case <-time.After(pause):
				}
			}
		})
	}
	defer wg.Wait()
	defer close(stop)

	waitOps := func(n int64, d time.Duration) {
		deadline := time.Now().Add(d)
		for ops.Load() < n && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitOps(faultLinOps, 10*time.Second)
	before := ops.Load()
	start := time.Now()
	inject()
	over, during := time.Now(), ops.Load()-before
	waitOps(ops.Load()+faultLinOps, faultLinAfter)
	t.Logf("seed %d: %d operations before the fault, %d during it (%v), %d after",
		seed, before, during, over.Sub(start).Round(time.Millisecond), ops.Load()-before-during)
}

// faultPause is how long a client of a fault run waits after an answer:
// a 5xx's Retry-After where it has one (lockapi's 503 says 1 s), as real
// clients do; faultLinBackoff after no answer; faultLinPace otherwise.
//
// Honouring Retry-After is what keeps the fault's history checkable: every
// 5xx is an operation whose outcome is unknown, and porcupine's search
// grows with each one that overlaps another on the same name. Clients that
// retried a 503 every 100 ms made about a hundred of them around a Sentinel
// failover, 31 on one name, whose check no minute decided (Unknown).
func faultPause(r reply) time.Duration {
	switch {
	case r.unavailableFor > 0:
		return r.unavailableFor
	case !r.answered:
		return faultLinBackoff
	}
	return faultLinPace
}
