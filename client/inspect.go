package client

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/lockapi/lockapi/client/api"
)

// LockMode says how a lock is held.
type LockMode = api.LockMode

// The lock modes (docs/LOCK_KINDS.md).
const (
	ModeExclusive = api.LockModeExclusive // one writer, perhaps with shared leases of its own owner
	ModeShared    = api.LockModeShared    // readers only
	ModeSemaphore = api.LockModeSemaphore // permits of a semaphore
)

// LockState is a lock's state, as anyone with read access may see it: the
// holders' leases without their lease ids. It marshals to JSON in the form
// of the server's answer (LockState in openapi.yaml).
type LockState struct {
	Lock string
	Held bool
	// Mode is how the lock is held; "" when it is free.
	Mode LockMode
	// Holder is the exclusive lease, when there is one; nil when the lock
	// is free, held by readers only, or a semaphore.
	Holder *Holder
	// Holders lists every live lease in the order they were granted: the
	// exclusive one, readers' shared ones, or a semaphore's permits.
	Holders []Holder
	// Limit is the semaphore's number of permits; 0 for a lock.
	Limit int
	// QueueLength counts the waiters queued for the lock.
	QueueLength int
	// LastToken is the last fencing token issued for the lock; 0 if it was
	// never acquired.
	LastToken uint64
	// LockDelay is what was left of the lock's lock-delay when the server
	// answered: until it ends, acquires fail with a *LockDelayError (or
	// wait through it). 0 when the lock is not closed.
	LockDelay time.Duration
	// Index is opaque and changes whenever the state changes.
	Index string
}

// Holder is one live lease of a lock, without its lease id.
type Holder struct {
	Owner      string
	Shared     bool   // a shared (read) lease
	Token      uint64 // the lease's fencing token
	HoldCount  int
	AcquiredAt time.Time
	// ExpiresAt is when the lease ends unless renewed, by the server's clock.
	ExpiresAt time.Time
	Metadata  map[string]string
	// Session is the session the lease is bound to; "" for none.
	Session string
}

// Inspect returns the state of the lock name (GET /v1/locks/{name}). A free
// lock is no error: its Held is false. Errors are a *ProblemError (a bad
// name, a refused API key), a failure wrapping ErrUnavailable, or ctx's
// error.
func (c *Client) Inspect(ctx context.Context, name string) (*LockState, error) {
	rctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	resp, err := c.api.GetLockWithResponse(rctx, name, nil)
	switch {
	case err != nil && ctx.Err() != nil:
		return nil, fmt.Errorf("lockapi: inspect %q: %w", name, context.Cause(ctx))
	case err != nil:
		return nil, fmt.Errorf("lockapi: inspect %q: %w", name, unavailable(err))
	case resp.JSON200 == nil:
		return nil, responseError(name, resp.HTTPResponse, resp.Body)
	}
	return newLockState(resp.JSON200), nil
}

func newLockState(s *api.LockState) *LockState {
	st := &LockState{
		Lock:        s.Lock,
		Held:        s.Held,
		Limit:       int(s.Limit),
		QueueLength: int(s.QueueLength),
		LastToken:   uint64(s.FencingToken),
		Index:       s.Index,
	}
	if s.Mode != nil {
		st.Mode = *s.Mode
	}
	if s.LockDelayRemainingMs != nil {
		st.LockDelay = time.Duration(*s.LockDelayRemainingMs) * time.Millisecond
	}
	if s.Holder != nil {
		h := newHolder(*s.Holder)
		st.Holder = &h
	}
	for _, h := range s.Holders {
		st.Holders = append(st.Holders, newHolder(h))
	}
	return st
}

func newHolder(h api.Holder) Holder {
	out := Holder{
		Owner:      h.Owner,
		Shared:     h.Mode == api.LeaseModeShared,
		Token:      uint64(h.FencingToken),
		HoldCount:  int(h.HoldCount),
		AcquiredAt: h.AcquiredAt,
		ExpiresAt:  h.ExpiresAt,
		Metadata:   h.Metadata,
	}
	if h.Session != nil {
		out.Session = *h.Session
	}
	return out
}

// MarshalJSON writes s as the server answers it.
func (s LockState) MarshalJSON() ([]byte, error) {
	out := api.LockState{
		Lock:         s.Lock,
		Held:         s.Held,
		Holders:      make([]api.Holder, 0, len(s.Holders)),
		Limit:        int32(s.Limit),
		QueueLength:  int32(s.QueueLength),
		FencingToken: int64(s.LastToken),
		Index:        s.Index,
	}
	if s.Mode != "" {
		out.Mode = &s.Mode
	}
	if s.LockDelay > 0 {
		ms := ceilMs(s.LockDelay)
		out.LockDelayRemainingMs = &ms
	}
	if s.Holder != nil {
		h := s.Holder.api()
		out.Holder = &h
	}
	for _, h := range s.Holders {
		out.Holders = append(out.Holders, h.api())
	}
	return json.Marshal(out)
}

func (h Holder) api() api.Holder {
	mode := api.LeaseModeExclusive
	if h.Shared {
		mode = api.LeaseModeShared
	}
	md := h.Metadata
	if md == nil {
		md = map[string]string{}
	}
	out := api.Holder{
		Owner:        h.Owner,
		Mode:         mode,
		FencingToken: api.FencingToken(h.Token),
		HoldCount:    int32(h.HoldCount),
		AcquiredAt:   h.AcquiredAt,
		ExpiresAt:    h.ExpiresAt,
		Metadata:     md,
	}
	if h.Session != "" {
		out.Session = &h.Session
	}
	return out
}
