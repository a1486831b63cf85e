package tests

import (
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/lockapi/lockapi/internal/testkit/redistest"
)

// The planned failover that clients do not see (issue 29): a SENTINEL
// FAILOVER with min_replicas 0 under the fault suite's workload, with
// leases short enough that a lost release shows as a stall of about the
// TTL, and clients that give up a release after 4 retries 250 ms apart, as
// a real client would. The write gate makes writes sent while the replica
// is promoted wait for the new master instead of answering 503: nobody
// retries, nothing is lost, and no lock stays held until its TTL.
//
// The workload and the checks are the fault suite's (fault_test.go), but
// for the bounded release retries, the longest gap measured per lock (a
// lock left held stalls its own clients, not the others'), and 5xx
// answers, which this row must not have at all.

const (
	plannedTTL             = 5 * time.Second
	plannedWait            = 10 * time.Second
	plannedReleaseRetries  = 4
	plannedReleaseInterval = 250 * time.Millisecond
	plannedWarmup          = 5 * time.Second
	// plannedAfter is how long the workload runs on after the failover:
	// longer than the TTL, so that a lock left held until it expires
	// shows as a gap of about the TTL.
	plannedAfter = plannedTTL + 2*time.Second
	// plannedFailoverTimeout is the sentinels' failover-timeout; the gate
	// holds writes for at most this plus 1 s.
	plannedFailoverTimeout = 3 * time.Second
	plannedMaxGap          = 1500 * time.Millisecond
)

// plannedRun is a faultRun whose clients give up a release after
// plannedReleaseRetries retries.
type plannedRun struct {
	*faultRun
	gaveUp int // releases given up; f.mu guards it
}

func TestFaults_planned_failover_unseen(t *testing.T) {
	if testing.Short() {
		t.Skip("the fault suite runs real topologies")
	}
	t.Parallel() // beside the fault suite: see TestFaults
	sen := redistest.StartSentinel(t, redistest.WithFailoverTimeout(plannedFailoverTimeout))
	env := []string{fmt.Sprintf("LOCKAPI_REDIS_TIMEOUT=%dms", redisTimeoutMs), "LOCKAPI_MAX_WAIT=10s",
		"LOCKAPI_REDIS_URL=" + sen.URL(), "LOCKAPI_REDIS_MODE=sentinel", "LOCKAPI_MIN_REPLICAS=0"}
	f := &faultRun{t: t, http: &http.Client{Timeout: 15 * time.Second}, ttl: plannedTTL, wait: plannedWait, sessionTTL: plannedTTL}
	for range 2 {
		f.servers = append(f.servers, startServer(t, env, "--log-level", "info"))
	}
	for i := range faultLocks {
		f.locks = append(f.locks, fmt.Sprintf("hot-%d", i))
	}
	p := &plannedRun{faultRun: f}

	stop := make(chan struct{})
	var clients sync.WaitGroup
	for i := range faultClients {
		clients.Add(1)
		go func() {
			defer clients.Done()
			p.client(i, stop)
		}()
	}
	time.Sleep(plannedWarmup)
	begun := time.Now()
	old, promoted := sen.Failover(t)
	over := time.Now()
	time.Sleep(plannedAfter)
	close(stop)
	clients.Wait()

	fc := faultCase{name: "planned SENTINEL FAILOVER unseen, min_replicas 0, TTL 5 s, wait 10 s, release retried ≤ 4 × 250 ms",
		recoveryOf: "wake", noLostLeases: true}
	r := f.result(fc, over)
	gap, gapLock, gapAt := p.longestGapPerLock()
	f.mu.Lock()
	failures, gaveUp, after := len(f.failures), p.gaveUp, 0
	for _, g := range f.grants {
		if g.recv.After(over) {
			after++
		}
	}
	f.mu.Unlock()
	t.Logf("failover %s -> %s from %v to %v into the run; %d grants (%d after), longest gap on one lock %v (%s, ending %v into the run), "+
		"5xx or refused %d, 410s %d, releases given up %d, overlaps %d, tokens backwards %d, stale writes refused %d / admitted %d, ghosts %d, slowest wake %v",
		old.Addr(), promoted.Addr(), begun.Sub(p.started()).Round(time.Millisecond), over.Sub(p.started()).Round(time.Millisecond),
		r.grants, after, gap.Round(time.Millisecond), gapLock, gapAt.Sub(p.started()).Round(time.Millisecond),
		failures, r.gone, gaveUp, r.overlaps, r.tokensBackward, r.staleRefused, r.staleAdmitted, r.ghosts, r.recovery.Round(time.Millisecond))
	r.check(t, fc)
	if after == 0 {
		t.Error("no grant after the failover")
	}
	if gap > plannedMaxGap {
		t.Errorf("longest gap between grants on %s: %v; want ≤ %v", gapLock, gap.Round(time.Millisecond), plannedMaxGap)
	}
	if failures > 0 {
		t.Errorf("%d answers 5xx (or connections refused); want none: the failover is for lockapi to hide", failures)
	}
	if gaveUp > 0 {
		t.Errorf("%d releases given up after %d retries", gaveUp, plannedReleaseRetries)
	}
}

// started is when the first grant was asked for: the run's clock.
func (p *plannedRun) started() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	var first time.Time
	for _, g := range p.grants {
		if first.IsZero() || g.asked.Before(first) {
			first = g.asked
		}
	}
	return first
}

// longestGapPerLock returns the longest time between two grants of one
// lock, that lock, and when the gap ended.
func (p *plannedRun) longestGapPerLock() (gap time.Duration, lock string, at time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, l := range p.locks {
		var recvs []time.Time
		for _, g := range p.grants {
			if g.lock == l {
				recvs = append(recvs, g.recv)
			}
		}
		slices.SortFunc(recvs, time.Time.Compare)
		for i := 1; i < len(recvs); i++ {
			if d := recvs[i].Sub(recvs[i-1]); d > gap {
				gap, lock, at = d, l, recvs[i]
			}
		}
	}
	return gap, lock, at
}

// client loops: acquire a hot lock (waiting), write to the fenced resource
// for 5-20 ms, release it, with at most plannedReleaseRetries retries. Half
// the clients hold their leases through a session, as in every row of the
// fault suite (faultRun.client).
func (p *plannedRun) client(i int, stop <-chan struct{}) {
	f := p.faultRun
	lock := f.locks[i%faultLocks]
	srv := i % len(f.servers)
	var sess *faultSession
	if f.sessionBound(i) {
		if sess = f.openSession(i, srv, stop); sess == nil {
			return
		}
		defer func() { f.closeSession(sess, srv) }()
	}
	for n := 0; ; n++ {
		lease, ok := f.acquire(i, &srv, &sess, lock, fmt.Sprintf("c%d-%d", i, n), stop)
		if !ok {
			return
		}
		start := time.Now()
		f.resource.write(lock, lease.FencingToken)
		sleepRandom(5*time.Millisecond, 20*time.Millisecond)
		f.resource.write(lock, lease.FencingToken)
		end := time.Now()
		f.mu.Lock()
		f.sections = append(f.sections, sectionRec{lock: lock, token: lease.FencingToken, start: start, end: end})
		f.mu.Unlock()
		switch status := p.release(&srv, lock, lease.LeaseID); {
		case sess == nil:
		case status == http.StatusOK:
			sess.released(lease.LeaseID)
		case status == http.StatusGone:
			sess.tell(time.Now(), "release")
		}
	}
}

// release frees the lease, retrying a 503 or a refused connection at most
// plannedReleaseRetries times, plannedReleaseInterval apart; then it gives
// up, and the lock stays held until its TTL. It returns the answer's
// status, 0 when it gave up.
func (p *plannedRun) release(srv *int, lock, id string) int {
	f := p.faultRun
	for try := 0; try <= plannedReleaseRetries; try++ {
		if try > 0 {
			time.Sleep(plannedReleaseInterval)
		}
		status, _, err := f.call(srv, "DELETE", "/v1/locks/"+lock+"/leases/"+id, nil)
		switch {
		case err != nil || status >= 500:
			continue
		case status == http.StatusGone:
			f.mu.Lock()
			f.gone++
			f.mu.Unlock()
		case status == http.StatusOK:
			f.mu.Lock()
			f.releases = append(f.releases, releaseRec{lock: lock, at: time.Now()})
			f.mu.Unlock()
		default:
			f.t.Errorf("release: %d", status)
		}
		return status
	}
	f.mu.Lock()
	p.gaveUp++
	f.mu.Unlock()
	return 0
}
