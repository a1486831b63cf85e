// Package lock holds lockapi's domain: lock names, leases, lock state, the
// typed errors every layer speaks, and the Store interface that the Redis and
// memory stores implement and the HTTP layer consumes.
//
// Nothing in here talks to Redis or HTTP; wiring happens in cmd/lockapi.
package lock

import (
	"context"
	"time"
)

// Lease is one holder's claim on a lock. A reentrant acquire by the same
// principal and owner returns the same lease with a higher HoldCount.
type Lease struct {
	Lock string
	// Mode is Exclusive or Shared. A semaphore permit is Exclusive with Limit
	// set: permits are counted, not shared.
	Mode      Mode
	Limit     int    // the semaphore's number of permits; 0 for a lock
	ID        string // ULID, chosen by the store at the fresh grant
	Owner     string
	Principal string // who acquired it; "" when the server runs open
	Token     uint64 // fencing token, strictly larger for every fresh grant
	HoldCount int
	TTL       time.Duration // the TTL the lease was last given; a bound lease's is its session's
	// Session is the id of the session the lease is bound to, "" for none:
	// a bound lease ends with its session (docs/SESSIONS.md).
	Session string
	// AcquiredAt is the fresh grant's time; ExpiresAt is when the lease ends
	// unless renewed. Both come from the store's clock (Redis TIME).
	AcquiredAt time.Time
	ExpiresAt  time.Time
	Metadata   map[string]string
}

// Holder is what anyone may see of a lock's current lease: everything but the
// lease id, which is the holder's capability to renew and release.
type Holder struct {
	// Mode is the mode of this holder's lease: Exclusive or Shared.
	Mode      Mode
	Owner     string
	Principal string
	Token     uint64
	HoldCount int
	// Session is the session the lease is bound to, "" for none.
	Session    string
	AcquiredAt time.Time
	ExpiresAt  time.Time
	// ExpiresIn is the lease's remaining TTL when the state was read: a
	// watcher times the expiry with it on its own clock, which may not agree
	// with the store's.
	ExpiresIn time.Duration
	Metadata  map[string]string
}

// State is a lock's current state. A free lock has Held false, Holder nil and
// no Holders.
type State struct {
	Lock string
	Held bool
	// Kind says how the lock is held: KindExclusive, KindShared or
	// KindSemaphore; "" when free.
	Kind Kind
	// Holder is the exclusive lease, when there is one (a semaphore's
	// permits are in Holders only).
	Holder *Holder
	// Holders lists every live lease: the exclusive one, shared ones, or a
	// semaphore's permits, in the order they were granted.
	Holders []Holder
	// Limit is the semaphore's number of permits; 0 for a lock.
	Limit int
	// Queue counts the waiters queued for the lock (fair waiters, and
	// exclusive waiters that readers hold off).
	Queue int
	// LastToken is the last fencing token ever issued for this lock (0 if never).
	LastToken uint64
	// LockDelay is what was left of the name's lock-delay when the state
	// was read (docs/SESSIONS.md): until it ends, every acquire is refused
	// with CodeLockDelay. 0 when the name is open.
	LockDelay time.Duration
	// Index is opaque and changes whenever the state changes; blocking
	// queries compare it.
	Index string
}

// AcquireRequest asks for a lease. Owner and Principal together decide
// reentrancy: the same pair re-acquiring a held lock gets the same lease.
type AcquireRequest struct {
	Lock      string
	Owner     string
	Principal string
	// TTL is the lease's; 0 with Session set, where the session's counts.
	TTL      time.Duration
	Metadata map[string]string
	// Session, when set, binds the lease to that session of Principal's:
	// it lives as long as the session (docs/SESSIONS.md). A store without
	// sessions refuses it with CodeUnsupported.
	Session string
	// MinReplicas, when positive, asks that a grant be answered only once
	// that many replicas confirmed it (Redis WAIT); otherwise it is undone
	// and the acquire fails as unavailable.
	MinReplicas int
	// IdempotencyKey, when set, makes a retry of this acquire safe: a later
	// acquire with the same key, owner and principal, while the lease lives,
	// returns the lease as it is instead of adding a hold.
	IdempotencyKey string

	// Mode is Exclusive (the default, "") or Shared.
	Mode Mode
	// Limit, when positive, makes the name a semaphore with Limit permits:
	// each acquire takes one permit. Every acquire of a held semaphore must
	// give the same limit.
	Limit int
	// Fair asks for arrival order: a waiting acquire (WaiterID set) joins the
	// lock's queue and is granted only at its head.
	Fair bool
	// Waited is how long the request has waited so far: AcquireWait sets
	// it on each try after the first, and a fresh grant records it
	// (Event.Waited) for everyone who reads the event log.
	Waited time.Duration
	// WaiterID names a waiting acquire in the lock's queue; AcquireWait sets
	// it, "" for a try. Its first byte encodes how the entry queues (see
	// NewWaiterID), so that a store reads it without another lookup.
	WaiterID string
}

// Mode is how a lease holds a lock.
type Mode string

const (
	Exclusive Mode = "exclusive"
	Shared    Mode = "shared"
)

// Kind is how a lock is held at a moment.
type Kind string

const (
	KindExclusive Kind = "exclusive" // one exclusive lease (perhaps with its owner's shared ones)
	KindShared    Kind = "shared"    // shared leases only
	KindSemaphore Kind = "semaphore" // permits of a semaphore
)

// Grant is the answer to a successful acquire.
type Grant struct {
	Lease Lease
	// Fresh is true when the lock went from free to held (a new token), and
	// false for a reentrant acquire.
	Fresh bool
	// RequestID names this acquire in the store, so that Abandon can undo
	// exactly the hold it added. For a fresh grant it is the lease id.
	RequestID string
	// Replayed is true when the acquire repeated an earlier one with the same
	// IdempotencyKey and was answered with its lease, adding nothing.
	Replayed bool
}

// LeaseRef names a lease for renew and release.
type LeaseRef struct {
	Lock string
	ID   string
	// Principal, when set, must be the principal that acquired the lease;
	// anyone else gets CodeForbidden. "" skips the check: an admin, or a
	// server that runs without API keys.
	Principal string
}

// ReleaseResult is the answer to a successful release.
type ReleaseResult struct {
	Lock      string
	LeaseID   string
	HoldCount int  // holds left; 0 when Released
	Released  bool // the lock became free (or had been freed by this lease)
	// Retried is true when this lease had already freed the lock and the
	// release was answered again without touching anything.
	Retried bool
}

// ListRequest pages through the held locks whose names start with Prefix,
// and those closed for a lock-delay.
type ListRequest struct {
	Prefix string
	Limit  int
	Cursor string // "" starts at the beginning
	// Visible, when set, selects the names the caller may see: the others
	// are passed over as if they were not held, before Limit counts, so
	// that neither a page's length nor its cursor tells them apart from
	// names that do not exist (docs/SECURITY.md).
	Visible func(name string) bool
}

// Shows reports whether r's Visible selects name.
func (r ListRequest) Shows(name string) bool {
	return r.Visible == nil || r.Visible(name)
}

// ListPage is one page of held locks. NextCursor is "" on the last page.
type ListPage struct {
	Locks      []State
	NextCursor string
}

// Store keeps locks. Every method is atomic with respect to the others, and a
// lease that is not the current holder can never change anything.
type Store interface {
	// TryAcquire grants the lock or fails at once with CodeHeld. req is
	// valid (AcquireRequest.Validate, ValidateAll): a store trusts it and
	// checks none of it again.
	TryAcquire(ctx context.Context, req AcquireRequest) (Grant, error)
	// Renew resets the TTL of the current lease; ttl 0 reuses the lease's TTL.
	Renew(ctx context.Context, lease LeaseRef, ttl time.Duration) (Lease, error)
	// Update replaces the metadata of the current lease (nil or empty: none)
	// and leaves its token, TTL, expiry and holds as they are. It records an
	// EventUpdated carrying the new metadata, and changes the lock's Index.
	// metadata is valid (CheckMetadata). A store that cannot keep one copy
	// of a lease's metadata (redlock) answers CodeUnsupported.
	Update(ctx context.Context, lease LeaseRef, metadata map[string]string) (Lease, error)
	// Release drops one hold, or all holds when all is true. Retrying the
	// release that freed the lock succeeds again.
	Release(ctx context.Context, lease LeaseRef, all bool) (ReleaseResult, error)
	// Inspect reads a lock's state; a free lock is not an error.
	Inspect(ctx context.Context, name string) (State, error)
	// Abandon undoes the hold that the acquire named requestID added, if it
	// ran and nobody claimed its answer since (an idempotent replay). It is
	// for grants whose answer never reached the caller; it is safe to call
	// for an acquire that never ran, and to call again.
	Abandon(ctx context.Context, name, requestID string) error
	// Leave takes a waiter out of the lock's queue (it gave up or was
	// cancelled). It is safe to call for a waiter that never queued.
	Leave(ctx context.Context, name, waiterID string) error
	// ForceRelease frees a lock whoever holds it; principal is who did it
	// (recorded in its event). It reports whether the lock
	// was held.
	ForceRelease(ctx context.Context, name, principal string) (bool, error)
	// List pages through held locks, and free ones closed for a
	// lock-delay (State.LockDelay).
	List(ctx context.Context, req ListRequest) (ListPage, error)
	// Watch registers interest in a lock's changes. The registration is in
	// effect when Watch returns, so a change made after that is never missed.
	Watch(ctx context.Context, name string, kind WatchKind) (Watcher, error)
	// Ping reports whether the store is reachable.
	Ping(ctx context.Context) error
	// Sessions returns the store's sessions, nil when it has none: the
	// server then answers every session route 501 unsupported.
	Sessions() Sessions
	// Events returns the store's event log (docs/EVENTS.md), nil when it
	// records none: events turned off (LOCKAPI_EVENTS=false), or redlock
	// mode. cmd/lockapi hands this one log to every consumer.
	Events() EventLog
	Close() error
}

// WatchKind says which changes wake a Watcher.
type WatchKind int

const (
	// WaitForRelease wakes one waiter per process when the lock becomes free,
	// so a release does not stampede the store with every waiter at once.
	WaitForRelease WatchKind = iota
	// WatchChanges wakes every watcher on any change of the lock's state.
	WatchChanges
)

// Watcher is a registered interest in one lock.
type Watcher interface {
	// C receives a value when the watcher should look at the lock again.
	C() <-chan struct{}
	// ExpectExpiry tells the watcher when the current holder's lease ends:
	// expiry publishes nothing, so someone must look again then.
	ExpectExpiry(at time.Time)
	// PassOn gives a wake-up the watcher consumed but could not act on (its
	// try failed, or its caller left) to the next waiter.
	PassOn()
	// Join tells the watcher the id its waiter holds in the lock's queue: a
	// notice that names that id as the queue's head wakes this watcher,
	// whichever waiter of the process came first.
	Join(waiterID string)
	// Close unregisters. A wake-up the watcher received but did not read is
	// passed to the next waiter.
	Close()
	// Notify has f called, without blocking and on no goroutine of its
	// own, whenever C receives: a waiter that parks (Waiting.Park) keeps
	// no goroutine blocked on C. nil stops the calls.
	Notify(f func())
}
