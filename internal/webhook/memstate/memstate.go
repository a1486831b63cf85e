// Package memstate keeps webhook.State in the process's memory: for the
// embedded memory store, whose events live and die with the process too.
package memstate

import (
	"context"
	"maps"
	"slices"
	"sync"

	"github.com/lockapi/lockapi/internal/lock"
	"github.com/lockapi/lockapi/internal/webhook"
)

// State is a webhook.State in memory.
type State struct {
	mu      sync.Mutex
	subs    map[string]webhook.Subscription
	dedupe  map[string]string // DedupeKey -> id
	cursors map[string]string
	dead    map[string]map[string]webhook.DeadLetter // id -> event id -> letter
	replays map[string]map[string]webhook.DeadLetter
	// watchers are the channels of Changes.
	watchers map[chan struct{}]struct{}
}

var (
	_ webhook.State    = (*State)(nil)
	_ webhook.Notifier = (*State)(nil)
)

// New returns an empty State.
func New() *State {
	return &State{
		subs:    map[string]webhook.Subscription{},
		dedupe:  map[string]string{},
		cursors: map[string]string{},
		dead:    map[string]map[string]webhook.DeadLetter{},
		replays: map[string]map[string]webhook.DeadLetter{},

		watchers: map[chan struct{}]struct{}{},
	}
}

// Changes tells of the subscriptions created and deleted and the replays
// queued in this State: in memory, no change is ever missed.
func (m *State) Changes(ctx context.Context) <-chan struct{} {
	ch := make(chan struct{}, 1)
	ch <- struct{}{} // subscribed
	m.mu.Lock()
	m.watchers[ch] = struct{}{}
	m.mu.Unlock()
	context.AfterFunc(ctx, func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		delete(m.watchers, ch)
		close(ch)
	})
	return ch
}

// changedLocked tells every watcher of a change; m.mu is held.
func (m *State) changedLocked() {
	for ch := range m.watchers {
		select {
		case ch <- struct{}{}:
		default: // one is pending already
		}
	}
}

// clone copies the slices of a subscription, so that callers never share
// them with the State.
func clone(s webhook.Subscription) webhook.Subscription {
	s.Types = slices.Clone(s.Types)
	s.Secrets = slices.Clone(s.Secrets)
	return s
}

func (m *State) Create(ctx context.Context, sub webhook.Subscription, cursor string, quota int) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	key := sub.DedupeKey()
	if id, ok := m.dedupe[key]; ok {
		return webhook.Exists(id)
	}
	if quota > 0 && m.countOf(sub.Principal) >= quota {
		return lock.QuotaExceeded("webhooks", quota)
	}
	m.dedupe[key] = sub.ID
	m.subs[sub.ID] = clone(sub)
	m.cursors[sub.ID] = cursor
	m.changedLocked()
	return nil
}

// countOf counts principal's subscriptions; m.mu is held. A State holds a
// few hundred at most: a walk costs less than an index to keep.
func (m *State) countOf(principal string) int {
	n := 0
	for _, s := range m.subs {
		if s.Principal == principal {
			n++
		}
	}
	return n
}

func (m *State) List(ctx context.Context) ([]webhook.Subscription, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]webhook.Subscription, 0, len(m.subs))
	for _, s := range m.subs {
		out = append(out, clone(s))
	}
	return out, nil
}

func (m *State) Get(ctx context.Context, id string) (webhook.Subscription, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.subs[id]
	if !ok {
		return webhook.Subscription{}, webhook.NotFound(id)
	}
	return clone(s), nil
}

func (m *State) Delete(ctx context.Context, id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.subs[id]
	if !ok {
		return webhook.NotFound(id)
	}
	delete(m.subs, id)
	delete(m.dedupe, s.DedupeKey())
	delete(m.cursors, id)
	delete(m.dead, id)
	delete(m.replays, id)
	m.changedLocked()
	return nil
}

func (m *State) Cursor(ctx context.Context, id string) (string, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	c, ok := m.cursors[id]
	return c, ok, nil
}

func (m *State) SetCursor(ctx context.Context, id, cursor string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.cursors[id] = cursor
	return nil
}

func (m *State) AddDeadLetter(ctx context.Context, id string, d webhook.DeadLetter) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	letters := m.dead[id]
	if letters == nil {
		letters = map[string]webhook.DeadLetter{}
		m.dead[id] = letters
	}
	letters[d.EventID] = d
	if over := len(letters) - webhook.MaxDeadLetters; over > 0 {
		for _, eid := range sortedIDs(letters)[:over] {
			delete(letters, eid)
		}
	}
	return nil
}

func (m *State) DeadLetters(ctx context.Context, id, after string, limit int) ([]webhook.DeadLetter, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return page(m.dead[id], after, limit), nil
}

func (m *State) Replay(ctx context.Context, id, eventID string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	d, ok := m.dead[id][eventID]
	if !ok {
		return webhook.DeadLetterNotFound(id, eventID)
	}
	delete(m.dead[id], eventID)
	if m.replays[id] == nil {
		m.replays[id] = map[string]webhook.DeadLetter{}
	}
	m.replays[id][eventID] = d
	m.changedLocked()
	return nil
}

func (m *State) Replays(ctx context.Context, id string, limit int) ([]webhook.DeadLetter, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return page(m.replays[id], "", limit), nil
}

func (m *State) DoneReplay(ctx context.Context, id, eventID string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.replays[id], eventID)
	return nil
}

// sortedIDs returns the keys of letters in event order.
func sortedIDs(letters map[string]webhook.DeadLetter) []string {
	return slices.SortedFunc(maps.Keys(letters), lock.CompareEventIDs)
}

// page returns up to limit letters after the event id after, in event
// order.
func page(letters map[string]webhook.DeadLetter, after string, limit int) []webhook.DeadLetter {
	var out []webhook.DeadLetter
	for _, eid := range sortedIDs(letters) {
		if after != "" && lock.CompareEventIDs(eid, after) <= 0 {
			continue
		}
		if limit > 0 && len(out) == limit {
			break
		}
		out = append(out, letters[eid])
	}
	return out
}
