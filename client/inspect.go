package client

import (
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"net/http"
	"time"

	"github.com/lockapi/lockapi/client/api"
)

// LockMode says how a lock is held.
type LockMode string

// The lock modes (docs/LOCK_KINDS.md).
const (
	ModeExclusive LockMode = "exclusive" // one writer, perhaps with shared leases of its own owner
	ModeShared    LockMode = "shared"    // readers only
	ModeSemaphore LockMode = "semaphore" // permits of a semaphore
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
	return c.getLock(ctx, name, nil, 0)
}

// Watch is a blocking query of the lock name, as Consul's: it answers with
// the lock's state as soon as its Index differs from index, or after wait
// (clamped to the server's maximum wait, 60s by default) with the state as
// it is. Pass each answer's Index to the next Watch to follow a lock:
//
//	st, err := c.Inspect(ctx, name)
//	for err == nil {
//		// ... st is the lock's latest state
//		st, err = c.Watch(ctx, name, st.Index, time.Minute)
//	}
//
// An index of "" answers at once, as Inspect does. Errors are Inspect's.
func (c *Client) Watch(ctx context.Context, name, index string, wait time.Duration) (*LockState, error) {
	params := &api.GetLockParams{}
	if index != "" {
		params.Index = &index
	}
	if wait > 0 {
		ms := ceilMs(wait)
		params.WaitMs = &ms
	}
	return c.getLock(ctx, name, params, wait)
}

func (c *Client) getLock(ctx context.Context, name string, params *api.GetLockParams, wait time.Duration) (*LockState, error) {
	var s api.LockState
	err := c.call(ctx, fmt.Sprintf("inspect %q", name), name, wait+c.timeout, func(ctx context.Context) (*http.Response, error) {
		return c.api.GetLock(ctx, name, params)
	}, http.StatusOK, &s)
	if err != nil {
		return nil, err
	}
	return newLockState(&s), nil
}

// ListLocksOptions selects a page of ListLocks. Every field is optional.
type ListLocksOptions struct {
	// Prefix selects the locks whose names start with it.
	Prefix string
	// Limit is the most locks on a page; 0 is the server's default.
	Limit int
	// Cursor continues a listing where the last page's NextCursor left off.
	Cursor string
}

// LockPage is one page of ListLocks.
type LockPage struct {
	Locks []*LockState
	// NextCursor is the Cursor of the next page; "" on the last.
	NextCursor string
}

// ListLocks returns a page of the held locks (GET /v1/locks), in name
// order; Locks walks every page. Errors are Inspect's.
func (c *Client) ListLocks(ctx context.Context, opts ListLocksOptions) (*LockPage, error) {
	params := &api.ListLocksParams{}
	if opts.Prefix != "" {
		params.Prefix = &opts.Prefix
	}
	if opts.Limit > 0 {
		params.Limit = &opts.Limit
	}
	if opts.Cursor != "" {
		params.Cursor = &opts.Cursor
	}
	var list api.LockList
	err := c.call(ctx, "list locks", "", 0, func(ctx context.Context) (*http.Response, error) {
		return c.api.ListLocks(ctx, params)
	}, http.StatusOK, &list)
	if err != nil {
		return nil, err
	}
	page := &LockPage{Locks: make([]*LockState, 0, len(list.Locks))}
	for i := range list.Locks {
		page.Locks = append(page.Locks, newLockState(&list.Locks[i]))
	}
	if list.NextCursor != nil {
		page.NextCursor = *list.NextCursor
	}
	return page, nil
}

// Locks walks every page of ListLocks from opts.Cursor on, and yields each
// held lock; an error ends the sequence.
func (c *Client) Locks(ctx context.Context, opts ListLocksOptions) iter.Seq2[*LockState, error] {
	return func(yield func(*LockState, error) bool) {
		for {
			page, err := c.ListLocks(ctx, opts)
			if err != nil {
				yield(nil, err)
				return
			}
			for _, st := range page.Locks {
				if !yield(st, nil) {
					return
				}
			}
			if page.NextCursor == "" {
				return
			}
			opts.Cursor = page.NextCursor
		}
	}
}

// ForceRelease ends every lease of the lock name, as an admin (DELETE
// /v1/locks/{name}); released reports whether it was held. Its holders
// learn it from their loss watch within moments (at their next renewal if
// they turned it off): their leases are lost.
func (c *Client) ForceRelease(ctx context.Context, name string) (released bool, err error) {
	var res api.ForceReleaseResult
	err = c.call(ctx, fmt.Sprintf("force release %q", name), name, 0, func(ctx context.Context) (*http.Response, error) {
		return c.api.ForceRelease(ctx, name)
	}, http.StatusOK, &res)
	return res.Released, err
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
		st.Mode = LockMode(*s.Mode)
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
		mode := api.LockMode(s.Mode)
		out.Mode = &mode
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
