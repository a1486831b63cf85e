package lock

import (
	"context"
	"fmt"
	"time"

	"github.com/oklog/ulid/v2"
)

// Session is a TTL that leases are bound to (docs/SESSIONS.md): a bound
// lease lives while its session does, one renewal keeps all of them, and
// the session's end ends all of them at once.
type Session struct {
	ID        string // ULID, chosen by the store
	Owner     string
	Principal string // who created it; "" when the server runs open
	TTL       time.Duration
	// LockDelay is how long a name stays closed to new grants after a bound
	// lease of it ended by the session's expiry or a force release.
	LockDelay time.Duration
	// ExpiresAt is when the session ends unless renewed, by the store's
	// clock; an ended session's is when it ended.
	ExpiresAt time.Time
	// Leases are the bound leases that live, by lock name then lease id.
	Leases []SessionLease
}

// SessionLease is what a session shows of one bound lease.
type SessionLease struct {
	Lock    string
	LeaseID string
	Mode    Mode
	Limit   int
	Token   uint64
}

// SessionRequest asks for a new session. The caller fills in the defaults
// (DefaultSessionTTL); Validate checks the bounds.
type SessionRequest struct {
	Owner     string
	Principal string
	TTL       time.Duration
	LockDelay time.Duration
	// Quota is the most live sessions Principal may have, this one
	// included: past it CreateSession fails with CodeQuotaExceeded. 0: no
	// bound. The server chooses it (LOCKAPI_MAX_SESSIONS_PER_PRINCIPAL);
	// the store counts, so that the bound holds over every instance.
	Quota int
}

// SessionRef names a session. Principal, when set, must be the principal
// that created it: to anyone else the session does not exist
// (CodeSessionNotFound). "" skips the check: an admin, or an open server.
type SessionRef struct {
	ID        string
	Principal string
}

// SessionFilter selects sessions to list: those of Principal ("" for every
// principal's) whose owner starts with OwnerPrefix and that Visible (nil:
// every one) accepts, at most Limit of them. Visible is applied before
// Limit, so a page is never cut short by sessions the caller may not see.
type SessionFilter struct {
	Principal   string
	OwnerPrefix string
	Visible     func(Session) bool
	Limit       int
}

// Shows reports whether f selects s by its Visible rule.
func (f SessionFilter) Shows(s Session) bool {
	return f.Visible == nil || f.Visible(s)
}

// Sessions is the part of a store that keeps sessions. A store declares it
// with Store.Sessions; one without sessions returns nil there, and refuses
// an acquire that names a session with CodeUnsupported.
type Sessions interface {
	// CreateSession starts a session; req is valid (SessionRequest.Validate).
	// When req.Principal already has req.Quota live sessions it fails with
	// CodeQuotaExceeded.
	CreateSession(ctx context.Context, req SessionRequest) (Session, error)
	// RenewSession resets the session's expiry to now plus ttl (0: its own
	// TTL) and so every bound lease's. An ended session fails with
	// CodeSessionLost.
	RenewSession(ctx context.Context, ref SessionRef, ttl time.Duration) (Session, error)
	// GetSession reads a live session with its leases; an ended one fails
	// with CodeSessionLost.
	GetSession(ctx context.Context, ref SessionRef) (Session, error)
	// EndSession ends a live session and releases every bound lease at
	// once, as clean releases (no lock-delay). It answers the session as it
	// was, with the leases it released.
	EndSession(ctx context.Context, ref SessionRef) (Session, error)
	// ListSessions lists live sessions, by id.
	ListSessions(ctx context.Context, f SessionFilter) ([]Session, error)
}

// Bounds and defaults of sessions (docs/SESSIONS.md).
const (
	DefaultSessionTTL = 10 * time.Second
	MinSessionTTL     = 100 * time.Millisecond
	MaxSessionTTL     = time.Hour
	MaxLockDelay      = time.Minute
	// EndedSessionMemory is how long a store remembers an ended session,
	// so that it answers CodeSessionLost rather than CodeSessionNotFound.
	EndedSessionMemory = time.Hour
)

// Codes of sessions and lock-delay.
const (
	CodeSessionLost     Code = "session-lost"      // the session ended: expired or deleted (410)
	CodeSessionNotFound Code = "session-not-found" // no such session, or another principal's (404)
	CodeLockDelay       Code = "lock-delay"        // the name is closed for a lock-delay (409)
)

// SessionLost builds the error for a session that ended.
func SessionLost(id string) *Error {
	return &Error{Code: CodeSessionLost, Detail: fmt.Sprintf("session %q has ended: it expired or was deleted, and its leases are released", id)}
}

// SessionNotFound builds the error for an unknown session.
func SessionNotFound(id string) *Error {
	return &Error{Code: CodeSessionNotFound, Detail: fmt.Sprintf("no session %q", id)}
}

// LockDelayed builds the refusal of an acquire during a lock-delay that has
// left to run.
func LockDelayed(name string, left time.Duration) *Error {
	return &Error{Code: CodeLockDelay, RetryIn: left,
		Detail: fmt.Sprintf("lock %q lost a session's lease moments ago and is closed to new grants for %d ms more (lock-delay)", name, left.Milliseconds())}
}

// Validate checks a session request against the domain's rules. The
// server's maximum TTL is the caller's to check.
func (r SessionRequest) Validate() error {
	return invalidIf(
		CheckOwner("owner", r.Owner),
		CheckSessionTTL("ttl_ms", r.TTL),
		CheckLockDelay("lock_delay_ms", r.LockDelay),
	)
}

// CheckSessionTTL returns a field error for a session TTL out of bounds.
func CheckSessionTTL(field string, ttl time.Duration) *FieldError {
	if ttl >= MinSessionTTL && ttl <= MaxSessionTTL {
		return nil
	}
	return &FieldError{Field: field, Detail: fmt.Sprintf("a session's TTL is %d-%d ms", MinSessionTTL.Milliseconds(), MaxSessionTTL.Milliseconds())}
}

// CheckLockDelay returns a field error for a lock-delay out of bounds.
func CheckLockDelay(field string, d time.Duration) *FieldError {
	if d >= 0 && d <= MaxLockDelay {
		return nil
	}
	return &FieldError{Field: field, Detail: fmt.Sprintf("a lock-delay is 0-%d ms", MaxLockDelay.Milliseconds())}
}

// CheckSessionID returns a field error unless id looks like a ULID, as
// stores issue session ids.
func CheckSessionID(field, id string) *FieldError {
	if ValidULID(id) {
		return nil
	}
	return &FieldError{Field: field, Detail: "a session id is a 26-character ULID"}
}

// crockford marks the characters of an upper-case ULID.
var crockford = func() (t [256]bool) {
	for _, c := range "0123456789ABCDEFGHJKMNPQRSTVWXYZ" {
		t[c] = true
	}
	return t
}()

// ValidULID reports whether id looks like a ULID: 26 characters of
// Crockford base32, upper case, as stores issue lease and session ids.
func ValidULID(id string) bool {
	ok := len(id) == ulid.EncodedSize
	for i := 0; ok && i < len(id); i++ {
		ok = crockford[id[i]]
	}
	return ok
}
