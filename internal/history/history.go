// Package history keeps, in memory, a rolling window of the lock events a
// process reads from its one event feed (internal/eventfeed.Feed): per lock,
// the last leases that ended and figures over the last hour in one-minute
// buckets. It answers GET /v1/locks/{name}/history and GET /v1/stats/locks
// (docs/API.md) and the dashboard's Activity page, with no store call of
// its own: every instance sees every instance's events, so each answers
// alike, and a lock operation costs the store nothing more.
//
// At start a Window fills itself from the event log, reading back from its
// newest event at most Options.Fill events, or until it meets one older
// than the span; then it follows the feed from where it read. Events of
// types it does not know (a newer server's) are ignored.
//
// Memory is bounded: at most Options.MaxLocks names are tracked at once,
// each with at most Options.Leases ended leases (and Options.MaxLeases over
// every name) and one bucket per minute of the span in which it had an
// event. A name that has had no event for the span and holds no lease the
// window knows of is forgotten.
package history

import (
	"context"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/lockapi/lockapi/internal/eventfeed"
	"github.com/lockapi/lockapi/internal/lock"
)

// Defaults for the zero fields of Options.
const (
	DefaultLeases    = 100
	DefaultSpan      = time.Hour
	DefaultFill      = 100_000
	DefaultMaxLocks  = 200_000
	DefaultMaxLeases = 1_000_000
)

// Options tunes a Window. Zero fields get the defaults.
type Options struct {
	// Leases is how many ended leases are kept per lock (100;
	// LOCKAPI_HISTORY_LEASES).
	Leases int
	// Span is how far back the per-minute figures go (1h).
	Span time.Duration
	// Fill is the most events read from the log at start (100,000).
	Fill int
	// MaxLocks is the most names tracked at once (200,000): events of
	// further names are not counted until older names are forgotten.
	MaxLocks int
	// MaxLeases bounds the ended leases kept over every name (1,000,000):
	// past it, a name's ring stops growing and keeps fewer than Leases
	// (but one at least).
	MaxLeases int
	// Logger reports failed reads of the log.
	Logger zerolog.Logger
	// Now is the clock; time.Now when nil.
	Now func() time.Time
	// Added, when set, is called with each event the feed delivered once
	// the window has taken it in, on the window's goroutine: a test's
	// signal that a change has reached the window.
	Added func(lock.Event)
}

// EndReason says how a lease ended.
type EndReason uint8

// The ends of a lease; Live is a lease that has not ended.
const (
	Live EndReason = iota
	Released
	Expired
	ForceReleased
	SessionEnded
)

// String names r as the API does (ended_by).
func (r EndReason) String() string {
	switch r {
	case Released:
		return "released"
	case Expired:
		return "expired"
	case ForceReleased:
		return "force_released"
	case SessionEnded:
		return "session_ended"
	}
	return ""
}

// Lease is one lease of a lock as the window saw it.
type Lease struct {
	Owner     string
	Principal string
	Mode      lock.Mode
	Token     uint64
	Session   string
	// AcquiredAt is the grant's time: zero when the grant was not seen
	// (it is older than what the window read).
	AcquiredAt time.Time
	// EndedAt and EndedBy say how it ended; zero and Live while it lives.
	EndedAt time.Time
	EndedBy EndReason
	// Waited is how long its request waited for the grant.
	Waited time.Duration
}

// Held is how long the lease was held; 0 when either end is unknown.
func (l Lease) Held() time.Duration {
	if l.AcquiredAt.IsZero() || l.EndedAt.IsZero() {
		return 0
	}
	return l.EndedAt.Sub(l.AcquiredAt)
}

// Window is the rolling window. It is safe for concurrent use.
type Window struct {
	opts Options

	mu    sync.RWMutex
	locks map[string]*lockRec
	// untracked counts the events of names left out because MaxLocks were
	// tracked.
	untracked int64
	// kept counts the ended leases kept, over every name.
	kept int

	ready chan struct{} // closed once the fill from the log is done
	stop  context.CancelFunc
	done  chan struct{}
}

func (o Options) withDefaults() Options {
	if o.Leases <= 0 {
		o.Leases = DefaultLeases
	}
	if o.Span <= 0 {
		o.Span = DefaultSpan
	}
	if o.Fill <= 0 {
		o.Fill = DefaultFill
	}
	if o.MaxLocks <= 0 {
		o.MaxLocks = DefaultMaxLocks
	}
	if o.MaxLeases <= 0 {
		o.MaxLeases = DefaultMaxLeases
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

// New returns an empty window that follows nothing: Start's, and for tests,
// which Add events themselves.
func New(opts Options) *Window {
	w := newWindow(opts)
	close(w.ready)
	close(w.done)
	return w
}

func newWindow(opts Options) *Window {
	return &Window{opts: opts.withDefaults(), locks: make(map[string]*lockRec),
		ready: make(chan struct{}), done: make(chan struct{}), stop: func() {}}
}

// Start returns a window that fills itself from log and then follows feed
// (which reads the same log) until Close.
func Start(feed *eventfeed.Feed, log lock.EventLog, opts Options) *Window {
	w := newWindow(opts)
	ctx, stop := context.WithCancel(context.Background())
	w.stop = stop
	go func() {
		defer close(w.done)
		w.run(ctx, feed, log)
	}()
	return w
}

// Ready is closed once the window has read what the log kept at start.
func (w *Window) Ready() <-chan struct{} { return w.ready }

// Close stops following the feed, and returns once it has.
func (w *Window) Close() {
	w.stop()
	<-w.done
}

// Add takes one event into the window, as the feed delivers them.
func (w *Window) Add(e lock.Event) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.addLocked(e)
}

// History returns what the window holds of the lock name: its leases that
// live, as far as the window knows, then the ended ones, newest first, at
// most limit in all.
func (w *Window) History(name string, limit int) []Lease {
	w.mu.RLock()
	defer w.mu.RUnlock()
	r := w.locks[name]
	if r == nil || limit <= 0 {
		return nil
	}
	out := make([]Lease, 0, min(limit, len(r.live)+len(r.ended)))
	for i := len(r.live) - 1; i >= 0 && len(out) < limit; i-- {
		out = append(out, r.live[i].lease())
	}
	for i := range r.ended {
		if len(out) == limit {
			break
		}
		out = append(out, r.endedAt(i).lease())
	}
	return out
}

// Untracked is how many events were left out because MaxLocks names were
// tracked.
func (w *Window) Untracked() int64 {
	w.mu.RLock()
	defer w.mu.RUnlock()
	return w.untracked
}

// Len is how many names the window tracks.
func (w *Window) Len() int {
	w.mu.RLock()
	defer w.mu.RUnlock()
	return len(w.locks)
}
