package webhook

import (
	"context"
	"sync"
)

// DefaultMaxDeliveries bounds the delivery attempts one process makes at
// once (Config.MaxDeliveries).
const DefaultMaxDeliveries = 64

// slots bounds the delivery attempts in flight in a process: at most max
// at once, and at most half of them (perHost) to any one host, so that a
// slow or dead receiver, however many webhooks name it, leaves the other
// half to everyone else. Webhooks whose last attempt failed are on
// probation: their attempts together hold at most a quarter of the slots
// (ProbationDeliveries), so that many dead receivers, each under its own
// host name, leave three quarters to the live ones. A slot is held only
// while an attempt runs, which the attempt timeout bounds, never during
// the wait before a retry; and a worker delivers one event at a time, so
// one webhook holds one slot at most. Waiters take slots in the order they
// asked (a channel's senders are served first come, first served).
type slots struct {
	all       chan struct{}
	probation chan struct{}
	perHost   int

	mu    sync.Mutex
	hosts map[string]*hostSlots
}

// hostSlots are one host's share; users counts the attempts holding or
// waiting for one, so that the share is dropped when nobody needs it.
type hostSlots struct {
	ch    chan struct{}
	users int
}

func newSlots(max int) *slots {
	if max <= 0 {
		max = DefaultMaxDeliveries
	}
	return &slots{
		all:       make(chan struct{}, max),
		probation: make(chan struct{}, ProbationDeliveries(max)),
		perHost:   PerHostDeliveries(max),
		hosts:     map[string]*hostSlots{},
	}
}

// ProbationDeliveries is how many of max delivery slots the webhooks on
// probation (whose last attempt failed) may hold together: a quarter, and
// at least one.
func ProbationDeliveries(n int) int { return max(n/4, 1) }

// PerHostDeliveries is how many of max delivery slots one host may hold:
// half, and at least one.
func PerHostDeliveries(max int) int { return (max + 1) / 2 }

// take waits for a slot to host, of the probation's share too when
// probation is true; it fails only when ctx ends first. The returned func
// gives the slot back.
func (s *slots) take(ctx context.Context, host string, probation bool) (release func(), err error) {
	if !probation {
		return s.takeHost(ctx, host)
	}
	// The probation's share first: an attempt that waits for it holds
	// nothing the live webhooks could use.
	select {
	case s.probation <- struct{}{}:
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
	releaseHost, err := s.takeHost(ctx, host)
	if err != nil {
		<-s.probation
		return nil, err
	}
	return func() {
		releaseHost()
		<-s.probation
	}, nil
}

// takeHost waits for a slot to host, out of its share and of all.
func (s *slots) takeHost(ctx context.Context, host string) (release func(), err error) {
	s.mu.Lock()
	h := s.hosts[host]
	if h == nil {
		h = &hostSlots{ch: make(chan struct{}, s.perHost)}
		s.hosts[host] = h
	}
	h.users++
	s.mu.Unlock()
	leave := func() {
		s.mu.Lock()
		if h.users--; h.users == 0 {
			delete(s.hosts, host)
		}
		s.mu.Unlock()
	}
	// The host's share first: an attempt that waits for its host holds
	// none of the slots the other hosts could use.
	select {
	case h.ch <- struct{}{}:
	case <-ctx.Done():
		leave()
		return nil, context.Cause(ctx)
	}
	select {
	case s.all <- struct{}{}:
	case <-ctx.Done():
		<-h.ch
		leave()
		return nil, context.Cause(ctx)
	}
	return func() {
		<-s.all
		<-h.ch
		leave()
	}, nil
}
