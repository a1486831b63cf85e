package redlock

import (
	"context"
	"errors"
	"net"
	"sync"
	"time"

	"github.com/lockapi/lockapi/internal/lock"
	redisstore "github.com/lockapi/lockapi/internal/store/redis"
)

// A master that stops answering (SIGSTOP, a hung host, a partition that
// drops packets) costs every call that asks it its whole per-master
// deadline, several times per acquire+release pair: ask, write back the
// token, release. So once a call to a master times out, the master is
// marked down: later calls do not ask it, and the other masters decide as
// they do when it is slow (a majority of all N, never of the rest). A
// probe PINGs it in the background and, once it answers, replays what it
// missed that matters (repairs) before it rejoins.
//
// A call skipped on a down master never reached it, so it has nothing to
// undo there. Calls that did reach it and ran out of time are as before:
// its store's reaper abandons an acquire whose outcome is unknown once the
// master answers.

// probeInterval is how often a down master is PINGed: a probe starts every
// probeInterval, or when the previous one's deadline (the master's call
// deadline) passed, whichever is later.
const probeInterval = 150 * time.Millisecond

// maxRepairs bounds the calls kept for one down master; past it, a lease
// the master missed the release of stays there until its TTL, as it would
// without repairs.
const maxRepairs = 100_000

// errMarkedDown is the cause of the answer of a master that was not asked.
var errMarkedDown = errors.New("redlock: master marked down: it missed its deadline and has not answered a probe since")

// markedDown is a skipped master's answer: unavailable, like a master that
// did not answer in time, but known to have run nothing.
func markedDown() error {
	return &lock.Error{Code: lock.CodeUnavailable, Detail: "the lock store is unavailable", Err: errMarkedDown}
}

// skipped reports an answer of a master that was not asked.
func skipped(err error) bool { return errors.Is(err, errMarkedDown) }

// timedOut reports a call that ran out of time, the sign of a master that
// stopped answering (a refused connection fails fast and is not one).
func timedOut(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}

// repair is a call a master missed while it was down, run on it before it
// rejoins: a release that a majority carried out, or an abandon.
type repair func(ctx context.Context, m *redisstore.Store) error

// health knows which masters are marked down and probes them.
type health struct {
	masters []*redisstore.Store

	mu      sync.Mutex
	down    []bool
	repairs [][]repair // per master, while it is down
	closed  bool
	done    chan struct{}
	probes  sync.WaitGroup
}

func newHealth(masters []*redisstore.Store) *health {
	return &health{
		masters: masters,
		down:    make([]bool, len(masters)),
		repairs: make([][]repair, len(masters)),
		done:    make(chan struct{}),
	}
}

func (h *health) isDown(i int) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.down[i]
}

// markDown marks master i down and starts its probe, unless it is down
// already.
func (h *health) markDown(i int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.down[i] || h.closed {
		return
	}
	h.down[i] = true
	h.probes.Add(1)
	go h.probe(i)
}

// later keeps r for master i while it is down, to run before it rejoins.
// A master that rejoined meanwhile gets r now, in the background: its
// answer changes nothing the caller decides.
func (h *health) later(i int, r repair) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return
	}
	if h.down[i] {
		if len(h.repairs[i]) < maxRepairs {
			h.repairs[i] = append(h.repairs[i], r)
		}
		return
	}
	h.probes.Add(1)
	go func() {
		defer h.probes.Done()
		_ = r(context.Background(), h.masters[i])
	}()
}

// probe PINGs down master i until it answers and has taken its repairs,
// then marks it up.
func (h *health) probe(i int) {
	defer h.probes.Done()
	m := h.masters[i]
	next := time.After(probeInterval)
	for {
		select {
		case <-h.done:
			return
		case <-next:
		}
		next = time.After(probeInterval)
		// The master's store bounds each call by its deadline.
		if m.Ping(context.Background()) == nil && h.repair(i) {
			return
		}
	}
}

// repair runs master i's repairs and marks it up once none is left; it
// reports whether it did. A repair the master did not answer stays, with
// those after it, for the next probe.
func (h *health) repair(i int) bool {
	ctx := context.Background()
	for {
		h.mu.Lock()
		todo := h.repairs[i]
		h.repairs[i] = nil
		if len(todo) == 0 {
			// Under the lock: a repair added from now on runs at once.
			h.down[i] = false
			h.mu.Unlock()
			return true
		}
		h.mu.Unlock()
		for k, r := range todo {
			if err := r(ctx, h.masters[i]); lock.ErrorCode(err) == lock.CodeUnavailable {
				h.mu.Lock()
				h.repairs[i] = append(todo[k:], h.repairs[i]...)
				h.mu.Unlock()
				return false
			}
		}
	}
}

// close stops the probes and waits for them.
func (h *health) close() {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return
	}
	h.closed = true
	close(h.done)
	h.mu.Unlock()
	h.probes.Wait()
}

// call runs f on master i, unless it is marked down: then it answers
// markedDown at once, without asking it. A call that times out while the
// caller's context is still live marks the master down.
func call[T any](ctx context.Context, s *Store, i int, f func(ctx context.Context, m *redisstore.Store) (T, error)) (T, error) {
	if s.health.isDown(i) {
		var zero T
		return zero, markedDown()
	}
	v, err := f(ctx, s.masters[i])
	if err != nil && timedOut(err) && ctx.Err() == nil {
		s.health.markDown(i)
	}
	return v, err
}
