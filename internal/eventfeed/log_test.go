package eventfeed_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockapi/lockapi/internal/lock"
)

// testLog is a lock.EventLog the tests write to directly and can trim and
// break, to steer the feed into the cases a real store makes rare.
type testLog struct {
	mu      sync.Mutex
	n       int          // events ever appended
	events  []lock.Event // kept, oldest first
	trimmed string       // the id of the newest event trimmed
	changed chan struct{}
	// waitErr, when set, is the answer of the next WaitEvents.
	waitErr error

	waits   atomic.Int32 // WaitEvents calls in progress
	maxWait atomic.Int32 // the most at once
}

func newTestLog() *testLog { return &testLog{changed: make(chan struct{})} }

// Append records an event of lock name and returns it with its id. Ids
// repeat a millisecond four times, as Redis stream ids of one ms do.
func (l *testLog) Append(typ lock.EventType, name string) lock.Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.n++
	e := lock.Event{
		ID:   fmt.Sprintf("%d-%d", 1795460000000+l.n/4, l.n%4),
		Type: typ, Lock: name, Owner: "o", Mode: lock.Exclusive,
		Token: uint64(l.n), HoldCount: 1, Queue: -1, Time: time.Now(),
	}
	l.events = append(l.events, e)
	close(l.changed)
	l.changed = make(chan struct{})
	return e
}

// Trim drops all but the newest keep events.
func (l *testLog) Trim(keep int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if drop := len(l.events) - keep; drop > 0 {
		l.trimmed = l.events[drop-1].ID
		l.events = slices.Delete(l.events, 0, drop)
	}
}

// FailWait makes the next WaitEvents answer err, waking one that waits.
func (l *testLog) FailWait(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.waitErr = err
	close(l.changed)
	l.changed = make(chan struct{})
}

func (l *testLog) All() []lock.Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.events)
}

func (l *testLog) readLocked(after string, limit int) ([]lock.Event, error) {
	if after != "" && l.trimmed != "" && lock.CompareEventIDs(after, l.trimmed) < 0 {
		oldest := ""
		if len(l.events) > 0 {
			oldest = l.events[0].ID
		}
		return nil, lock.EventsGone(after, oldest)
	}
	i := 0
	if after != "" {
		i, _ = slices.BinarySearchFunc(l.events, after, func(e lock.Event, id string) int {
			return lock.CompareEventIDs(e.ID, id)
		})
		if i < len(l.events) && l.events[i].ID == after {
			i++
		}
	}
	out := l.events[i:]
	return slices.Clone(out[:min(limit, len(out))]), nil
}

func (l *testLog) ReadEvents(ctx context.Context, after string, limit int) ([]lock.Event, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.readLocked(after, limit)
}

func (l *testLog) WaitEvents(ctx context.Context, after string, limit int) ([]lock.Event, error) {
	n := l.waits.Add(1)
	defer l.waits.Add(-1)
	for {
		if m := l.maxWait.Load(); n > m && !l.maxWait.CompareAndSwap(m, n) {
			continue
		}
		break
	}
	for {
		l.mu.Lock()
		if err := l.waitErr; err != nil {
			l.waitErr = nil
			l.mu.Unlock()
			return nil, err
		}
		evs, err := l.readLocked(after, limit)
		changed := l.changed
		l.mu.Unlock()
		if err != nil || len(evs) > 0 {
			return evs, err
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func (l *testLog) ReadEventsBefore(ctx context.Context, before string, limit int) ([]lock.Event, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []lock.Event
	for i := len(l.events) - 1; i >= 0 && len(out) < limit; i-- {
		if before == "" || lock.CompareEventIDs(l.events[i].ID, before) < 0 {
			out = append(out, l.events[i])
		}
	}
	return out, nil
}

func (l *testLog) LastEventID(ctx context.Context) (string, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.events) == 0 {
		return l.trimmed, nil
	}
	return l.events[len(l.events)-1].ID, nil
}
