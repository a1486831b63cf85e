package client

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"time"

	"github.com/lockapi/lockapi/client/api"
)

// Leader election (docs/ELECTIONS.md) is a lock and its holder's metadata:
// a candidate campaigns by acquiring the lock, waiting while another leads;
// the leader's value is its lease's metadata, which Proclaim replaces
// (PATCH /v1/locks/{name}/leases/{id}); its term is the fencing token, which
// rises with every new leader; observers follow the lock with blocking
// queries. One leader at a time is the lock's promise, with its limits:
// a leader can pause past its lease, so whatever it writes to must fence
// with Term.

// CampaignOptions tunes a campaign. Every field is optional.
type CampaignOptions struct {
	// Owner names the candidate, as the lock's owner. Empty means a fresh
	// owner unique to this campaign. Give each candidate its own: the same
	// owner campaigning twice is one leadership with two holds.
	Owner string
	// TTL is the leadership's lease TTL; 0 is the server's default (30s).
	// It is kept alive every TTL/3, as a Lease is; a leader that stops
	// renewing loses the election within the TTL.
	TTL time.Duration
}

// campaignWait is how long one acquire of a campaign waits before it asks
// again: the campaign itself waits until elected or its ctx ends.
const campaignWait = time.Hour

// Campaign runs for leader of the election name: it blocks until this
// candidate leads, or ctx ends (then its error wraps ctx's cause). value
// is announced as the leader's (its lease's metadata: at most 16 labels)
// the moment it is elected. The Leadership is kept alive like a Lease
// until Resign, or until it is lost (Lost).
func (c *Client) Campaign(ctx context.Context, name string, value map[string]string, opts CampaignOptions) (*Leadership, error) {
	for {
		l, err := c.Acquire(ctx, name, AcquireOptions{Owner: opts.Owner, TTL: opts.TTL, Wait: campaignWait, Metadata: value})
		switch {
		case err == nil:
			return &Leadership{lease: l}, nil
		case ctx.Err() != nil:
			return nil, fmt.Errorf("lockapi: campaign %q: %w", name, context.Cause(ctx))
		case IsHeld(err), IsLockDelay(err):
			continue // still led by another after a whole wait: wait again
		}
		return nil, err
	}
}

// Leadership is a won election: the lease of its lock, renewed in the
// background until Resign or its loss.
type Leadership struct {
	lease *Lease
}

// Name returns the election's name (its lock's).
func (l *Leadership) Name() string { return l.lease.Name() }

// Owner returns the leader's owner, as observers see it.
func (l *Leadership) Owner() string { return l.lease.Owner() }

// Term returns the leadership's term: its lease's fencing token, larger
// than that of every earlier leader. Pass it to whatever the leader
// writes to, and have that refuse a smaller term than one it has seen.
func (l *Leadership) Term() uint64 { return l.lease.Token() }

// Value returns the leader's value as last proclaimed (do not modify).
func (l *Leadership) Value() map[string]string { return l.lease.Metadata() }

// Lease returns the lease that holds the election's lock.
func (l *Leadership) Lease() *Lease { return l.lease }

// Proclaim announces a new value without giving up leadership: it
// replaces the lease's metadata, which every observer then sees. An error
// wrapping ErrLeaseLost means the leadership is lost (Lost is closed).
func (l *Leadership) Proclaim(ctx context.Context, value map[string]string) error {
	return l.lease.UpdateMetadata(ctx, value)
}

// Resign gives the leadership up: it releases the lease, and the next
// candidate is elected. It returns an error wrapping ErrLeaseLost when the
// leadership had been lost before, as Lease.Release does.
func (l *Leadership) Resign(ctx context.Context) error { return l.lease.Release(ctx) }

// Lost returns a channel that is closed when the leadership is lost (not
// when it is resigned): stop acting as leader. Err then says why.
func (l *Leadership) Lost() <-chan struct{} { return l.lease.Lost() }

// Done returns a channel that is closed when the leadership ends, lost or
// resigned.
func (l *Leadership) Done() <-chan struct{} { return l.lease.Done() }

// Err returns nil while this candidate leads, and why it stopped after.
func (l *Leadership) Err() error { return l.lease.Err() }

// UpdateMetadata replaces the lease's metadata with md (nil or empty:
// none), leaving its token and TTL as they are (PATCH
// /v1/locks/{name}/leases/{id}): watchers of the lock see the change. An
// answer 410 means the lease is gone: the lease is then lost, and the
// error wraps ErrLeaseLost. A server in redlock mode refuses it (a
// *ProblemError 501 unsupported).
func (l *Lease) UpdateMetadata(ctx context.Context, md map[string]string) error {
	if err := l.Err(); err != nil {
		return err
	}
	body := api.UpdateLeaseRequest{Metadata: api.Metadata(maps.Clone(md))}
	if body.Metadata == nil {
		body.Metadata = api.Metadata{}
	}
	var got api.Lease
	err := l.c.call(ctx, fmt.Sprintf("update the metadata of lock %q", l.name), l.name, 0, func(ctx context.Context) (*http.Response, error) {
		return l.c.api.UpdateLease(ctx, l.name, l.id, body)
	}, http.StatusOK, &got)
	if errors.Is(err, ErrLeaseLost) {
		l.mu.Lock()
		l.gone = true
		l.mu.Unlock()
		l.end(l.lostError(err), true)
		return l.Err()
	}
	if err != nil {
		return err
	}
	l.mu.Lock()
	l.metadata = got.Metadata
	l.mu.Unlock()
	return nil
}

// LeaderInfo is an election's leader as an observer sees it.
type LeaderInfo struct {
	// Elected is false when nobody leads (the lock is free); the other
	// fields are then empty.
	Elected bool
	Owner   string
	// Value is the leader's value: its lease's metadata.
	Value map[string]string
	// Term is the leader's fencing token.
	Term uint64
	// Index is the lock state's, from which the information was read.
	Index string
}

// same reports whether i and o show the same leader with the same value.
func (i LeaderInfo) same(o LeaderInfo) bool {
	return i.Elected == o.Elected && i.Owner == o.Owner && i.Term == o.Term && maps.Equal(i.Value, o.Value)
}

// leaderOf reads the leader from a lock's state: its exclusive holder.
func leaderOf(st *LockState) LeaderInfo {
	info := LeaderInfo{Index: st.Index}
	if h := st.Holder; h != nil {
		info.Elected, info.Owner, info.Value, info.Term = true, h.Owner, h.Metadata, h.Token
	}
	return info
}

// Leader returns the election's leader now (GET /v1/locks/{name}); its
// Elected is false when nobody leads. Errors are Inspect's.
func (c *Client) Leader(ctx context.Context, name string) (LeaderInfo, error) {
	st, err := c.Inspect(ctx, name)
	if err != nil {
		return LeaderInfo{}, err
	}
	return leaderOf(st), nil
}

// observeWait is how long one blocking query of Observe waits; the server
// answers sooner when its maximum wait is shorter (60s by default).
const observeWait = time.Minute

// Observe follows the election name: the channel receives its leader now,
// then again on every change (a new leader, a new value, nobody leading),
// and nothing while nothing changes. It follows with blocking queries of
// the lock (Watch), each resuming from the last answer's index, so it
// costs one parked request, not a poll. Failures that may pass are
// retried with backoff; the channel is closed when ctx ends, or on an
// answer that retrying cannot change (a refused API key, a bad name).
//
// An observer may see a leader a moment after it lost its lease: act on
// the term, not on what Observe last said.
func (c *Client) Observe(ctx context.Context, name string) <-chan LeaderInfo {
	ch := make(chan LeaderInfo)
	go c.observe(ctx, name, ch)
	return ch
}

func (c *Client) observe(ctx context.Context, name string, ch chan<- LeaderInfo) {
	defer close(ch)
	var (
		index string
		last  LeaderInfo
		sent  bool
		bo    *backoff
	)
	for {
		st, err := c.Watch(ctx, name, index, observeWait)
		if err != nil {
			var pe *ProblemError
			if ctx.Err() != nil || (errors.As(err, &pe) && !errors.Is(err, ErrUnavailable)) {
				return
			}
			if bo == nil {
				bo = newBackoff(100*time.Millisecond, 5*time.Second)
			}
			if !sleepUntil(ctx, time.Now().Add(bo.next())) {
				return
			}
			continue
		}
		bo, index = nil, st.Index
		info := leaderOf(st)
		if sent && info.same(last) {
			continue
		}
		select {
		case ch <- info:
			last, sent = info, true
		case <-ctx.Done():
			return
		}
	}
}
