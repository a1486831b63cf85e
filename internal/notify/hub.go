// Package notify multiplexes a process's waiters onto per-lock notifications.
//
// Both stores use it: the memory store calls Notify on every change, the
// Redis store feeds it from one pub/sub connection. A Hub never polls: a
// waiter sleeps on a channel until a notification, the holder's expected
// expiry (expiry publishes nothing) or its own deadline.
//
// Herd control: a release wakes one release-waiter per process, not all of
// them. The woken waiter either tries the lock or, if it leaves without
// trying, passes the wake-up on (see Watcher.Close), so a release is never
// swallowed by a waiter that went away.
package notify

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/lockapi/lockapi/internal/lock"
)

// Subscriber connects a Hub to an external notification source. Its calls do
// network I/O and may block for long (a reconnect), so the Hub never makes
// them under its own mutex: they run on goroutines of the Hub, one call at a
// time per name and in the order the Hub decided them. Calls for different
// names may overlap.
type Subscriber interface {
	// Subscribe starts delivery for name. It must not wait for the source to
	// confirm; the source reports confirmation with Hub.Confirmed.
	Subscribe(name string) error
	// Unsubscribe stops delivery for name.
	Unsubscribe(name string) error
}

// ErrNotConfirmed is returned by Watch when the source did not confirm the
// subscription in time.
var ErrNotConfirmed = errors.New("notify: subscription not confirmed")

// Hub is safe for concurrent use. The zero value is not usable; call New.
type Hub struct {
	sub            Subscriber // nil: notifications come only from Notify
	confirmTimeout time.Duration

	mu      sync.Mutex
	entries map[string]*entry
	// pending counts subscribe requests sent per name and not yet confirmed.
	// It outlives entries, so a late confirmation of an earlier subscription
	// cannot mark a newer one ready.
	pending map[string]int
	// subscribed holds, per name, the entry whose Subscribe was the last call
	// made for that name; the name is absent once it has been unsubscribed.
	// An entry is confirmed only once it is the one subscribed: a
	// confirmation that arrives while its Subscribe still waits its turn
	// belongs to an earlier subscription.
	subscribed map[string]*entry
	// syncing marks the names a sync goroutine is issuing calls for. There is
	// at most one per name, which keeps that name's calls in order.
	syncing map[string]bool
}

type entry struct {
	name     string
	ready    chan struct{} // closed once the subscription is confirmed or failed
	isReady  bool
	err      error               // why the subscription failed; set before ready is closed
	waiters  []*Watcher          // WaitForRelease, in arrival order
	queued   map[string]*Watcher // waiters by their queue id (Watcher.Join)
	watchers map[*Watcher]struct{}
	expiry   *time.Timer
}

// Watcher is one registration; it implements lock.Watcher.
type Watcher struct {
	hub   *Hub
	entry *entry
	kind  lock.WatchKind
	c     chan struct{}
	queue string // the waiter's queue id, "" until it joins
	// notify is called when c receives (lock.Watcher's Notify).
	notify func()
}

// New returns a Hub. sub may be nil for an in-process source.
func New(sub Subscriber) *Hub {
	return &Hub{
		sub:            sub,
		confirmTimeout: 5 * time.Second,
		entries:        make(map[string]*entry),
		pending:        make(map[string]int),
		subscribed:     make(map[string]*entry),
		syncing:        make(map[string]bool),
	}
}

// Watch registers a watcher for name and returns once the registration is in
// effect: with a Subscriber, once the subscription has been confirmed. If the
// Subscriber fails to subscribe, Watch returns its error.
func (h *Hub) Watch(ctx context.Context, name string, kind lock.WatchKind) (*Watcher, error) {
	w := &Watcher{hub: h, kind: kind, c: make(chan struct{}, 1)}
	h.mu.Lock()
	e := h.entries[name]
	if e == nil {
		e = &entry{name: name, ready: make(chan struct{}), watchers: make(map[*Watcher]struct{})}
		h.entries[name] = e
		if h.sub == nil {
			e.markReady(nil)
		} else {
			h.sync(name)
		}
	}
	w.entry = e
	if kind == lock.WaitForRelease {
		e.waiters = append(e.waiters, w)
	} else {
		e.watchers[w] = struct{}{}
	}
	ready := e.ready
	h.mu.Unlock()

	select {
	case <-ready:
		return w.settled()
	default:
	}
	timer := time.NewTimer(h.confirmTimeout)
	defer timer.Stop()
	select {
	case <-ready:
		return w.settled()
	case <-ctx.Done():
		w.Close()
		return nil, ctx.Err()
	case <-timer.C:
		w.Close()
		// A confirmation this late is not coming (the connection is in
		// trouble); do not let its count block the next subscription.
		h.mu.Lock()
		if h.entries[name] == nil {
			delete(h.pending, name)
		}
		h.mu.Unlock()
		return nil, ErrNotConfirmed
	}
}

// settled finishes a Watch whose entry is ready: confirmed, or failed to
// subscribe. The entry's err is safe to read: it is written before ready is
// closed and never after.
func (w *Watcher) settled() (*Watcher, error) {
	if err := w.entry.err; err != nil {
		w.Close()
		return nil, err
	}
	return w, nil
}

// sync starts a goroutine issuing the Subscriber calls name needs, unless one
// is already running: that one sees the new state before it stops. Callers
// hold h.mu.
func (h *Hub) sync(name string) {
	if h.syncing[name] {
		return
	}
	h.syncing[name] = true
	go h.syncLoop(name)
}

// syncLoop brings the source's subscription of name in line with h.entries,
// one call at a time, releasing h.mu around each call. It decides each call
// from the state current at that moment, so whatever changed during the
// previous call is caught up on in order. Every entry gets a Subscribe (and
// waits for a confirmation) of its own, even when it replaces an entry that
// was subscribed: that subscription is unsubscribed first, as decided.
func (h *Hub) syncLoop(name string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for {
		e, on := h.entries[name], h.subscribed[name]
		switch {
		case on != nil && on != e:
			delete(h.subscribed, name)
			h.mu.Unlock()
			// An error leaves a subscription the source no longer needs;
			// its messages find no entry and are dropped.
			_ = h.sub.Unsubscribe(name)
			h.mu.Lock()
		case e != nil && on == nil:
			// Counted before the call: its confirmation may arrive before
			// the call returns.
			h.subscribed[name] = e
			h.pending[name]++
			h.mu.Unlock()
			err := h.sub.Subscribe(name)
			h.mu.Lock()
			if err != nil {
				h.failed(e, err)
			}
		default:
			delete(h.syncing, name)
			return
		}
	}
}

// failed handles a Subscribe for e that returned err: no confirmation is
// counted on, and e's waiting Watch calls fail with err. e is dropped so that
// the next Watch subscribes afresh; e stays the one subscribed, so syncLoop
// unsubscribes it first (a failed call may still have taken effect, as
// go-redis's does once it reconnects). Callers hold h.mu.
func (h *Hub) failed(e *entry, err error) {
	if h.pending[e.name] > 0 {
		h.pending[e.name]--
		if h.pending[e.name] == 0 {
			delete(h.pending, e.name)
		}
	}
	if h.entries[e.name] != e || e.isReady {
		return // nobody waits for it any more, or it works after all
	}
	delete(h.entries, e.name)
	if e.expiry != nil {
		e.expiry.Stop()
	}
	e.markReady(err)
}

// Confirmed reports that the source confirmed one subscribe for name. A
// confirmation nobody asked for means the source resubscribed after losing
// its connection: notifications may have been lost, so every watcher of name
// is woken to look again.
func (h *Hub) Confirmed(name string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.pending[name] == 0 {
		if e := h.entries[name]; e != nil {
			e.wakeAll()
		}
		return
	}
	h.pending[name]--
	if h.pending[name] > 0 {
		return
	}
	delete(h.pending, name)
	if e := h.entries[name]; e != nil && h.subscribed[name] == e {
		e.markReady(nil)
	}
}

// Notify delivers a change of name. released says the lock became free: it
// wakes one release-waiter. head, when set, names the waiter at the head of
// the lock's queue, which may now be granted: it wakes that waiter if it is
// in this process, and nobody else (the queue holds off everyone else).
// Every change watcher wakes either way. ttl, when positive, is the holder's
// new TTL (a grant or a renewal): the lock's expiry timer moves to it, so
// that a lease renewed shorter than before is not waited out at its old
// expiry.
func (h *Hub) Notify(name string, released bool, ttl time.Duration, head string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	e := h.entries[name]
	if e == nil {
		return
	}
	if head != "" {
		if w := e.queued[head]; w != nil {
			w.signal()
		}
	} else if released {
		e.wakeOne(nil)
	} else if ttl > 0 && len(e.waiters) > 0 {
		h.expireAt(e, time.Now().Add(ttl))
	}
	for w := range e.watchers {
		w.signal()
	}
}

// Reset is called when the source lost its connection. Confirmations of
// subscribes sent on it are lost with it; the source resubscribes what it
// still wants, so a name whose entry still waits for its confirmation gets
// exactly one, and a name nobody watches gets none. An entry whose Subscribe
// has not been sent yet gets its confirmation when it is sent, which counts
// it then. Everyone is woken to look again, since notifications may have been
// missed.
func (h *Hub) Reset() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for name := range h.pending {
		if e := h.entries[name]; e != nil && !e.isReady && h.subscribed[name] == e {
			h.pending[name] = 1
		} else {
			delete(h.pending, name)
		}
	}
	for _, e := range h.entries {
		e.wakeAll()
	}
}

// Len returns the number of registered watchers, for tests and metrics.
func (h *Hub) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, e := range h.entries {
		n += len(e.waiters) + len(e.watchers)
	}
	return n
}

// C implements lock.Watcher.
func (w *Watcher) C() <-chan struct{} { return w.c }

// Notify implements lock.Watcher.
func (w *Watcher) Notify(f func()) {
	w.hub.mu.Lock()
	defer w.hub.mu.Unlock()
	w.notify = f
}

// ExpectExpiry implements lock.Watcher. The hub keeps one timer per lock, set
// by the latest report, and on expiry wakes one release-waiter and every
// change watcher, as a release would.
func (w *Watcher) ExpectExpiry(at time.Time) {
	h := w.hub
	h.mu.Lock()
	defer h.mu.Unlock()
	e := w.entry
	if h.entries[e.name] != e {
		return // closed
	}
	h.expireAt(e, at)
}

// expireAt sets the lock's expiry timer. Callers hold h.mu.
func (h *Hub) expireAt(e *entry, at time.Time) {
	// A millisecond of slack: Redis expires a key once its time has passed.
	d := time.Until(at) + time.Millisecond
	if e.expiry == nil {
		e.expiry = time.AfterFunc(d, func() { h.expired(e) })
	} else {
		e.expiry.Reset(d)
	}
}

// Join implements lock.Watcher.
func (w *Watcher) Join(id string) {
	h := w.hub
	h.mu.Lock()
	defer h.mu.Unlock()
	e := w.entry
	if id == "" || w.kind != lock.WaitForRelease || h.entries[e.name] != e {
		return
	}
	if e.queued == nil {
		e.queued = make(map[string]*Watcher)
	}
	w.queue = id
	e.queued[id] = w
}

// PassOn implements lock.Watcher: a waiter that was woken but leaves without
// trying the lock gives the wake-up to the next waiter.
func (w *Watcher) PassOn() {
	h := w.hub
	h.mu.Lock()
	defer h.mu.Unlock()
	if w.kind == lock.WaitForRelease {
		w.entry.wakeOne(w)
	}
}

func (h *Hub) expired(e *entry) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.entries[e.name] != e {
		return
	}
	e.wakeOne(nil)
	for w := range e.watchers {
		w.signal()
	}
}

// Close implements lock.Watcher. A wake-up this watcher received but did not
// consume goes to the next release-waiter.
func (w *Watcher) Close() {
	h := w.hub
	h.mu.Lock()
	defer h.mu.Unlock()
	e := w.entry
	if w.kind == lock.WaitForRelease {
		if w.queue != "" {
			delete(e.queued, w.queue)
		}
		for i, x := range e.waiters {
			if x == w {
				e.waiters = append(e.waiters[:i], e.waiters[i+1:]...)
				break
			}
		}
		select {
		case <-w.c:
			e.wakeOne(w)
		default:
		}
	} else {
		delete(e.watchers, w)
	}
	if len(e.waiters) > 0 || len(e.watchers) > 0 || h.entries[e.name] != e {
		return
	}
	delete(h.entries, e.name)
	if e.expiry != nil {
		e.expiry.Stop()
	}
	if h.sub != nil {
		// Unsubscribes e, and subscribes whichever entry has taken its
		// place by the time the call's turn comes.
		h.sync(e.name)
	}
}

// signal wakes w. Callers hold h.mu.
func (w *Watcher) signal() bool {
	select {
	case w.c <- struct{}{}:
		if w.notify != nil {
			w.notify()
		}
		return true
	default:
		return false
	}
}

// wakeOne wakes the first release-waiter that has no wake-up pending,
// skipping except.
func (e *entry) wakeOne(except *Watcher) {
	for _, w := range e.waiters {
		if w != except && w.signal() {
			return
		}
	}
}

func (e *entry) wakeAll() {
	for _, w := range e.waiters {
		w.signal()
	}
	for w := range e.watchers {
		w.signal()
	}
}

// markReady ends the wait for e's subscription: confirmed if err is nil,
// failed otherwise.
func (e *entry) markReady(err error) {
	if !e.isReady {
		e.isReady = true
		e.err = err
		close(e.ready)
	}
}
