package redlock

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/lockapi/lockapi/internal/lock"
	redisstore "github.com/lockapi/lockapi/internal/store/redis"
)

// Watch implements lock.Store: the watcher watches every master that
// answers, and returns once a majority did. A release reaches a majority of
// the masters, which shares at least one with the watched ones, so no
// release goes unseen. The masters that answer later (one stopped, say,
// whose subscription would take the hub's confirmation timeout) join the
// watcher when they do.
func (s *Store) Watch(ctx context.Context, name string, kind lock.WatchKind) (lock.Watcher, error) {
	type result struct {
		w   lock.Watcher
		err error
	}
	results := make(chan result, len(s.masters))
	for _, m := range s.masters {
		go func() {
			mw, err := m.Watch(ctx, name, kind)
			results <- result{mw, err}
		}()
	}
	w := &watcher{c: make(chan struct{}, 1), stop: make(chan struct{}), last: -1}
	var errs []error
	n := 0
	for ; n < len(s.masters) && len(w.ws) < s.quorum; n++ {
		r := <-results
		errs = append(errs, r.err)
		if r.err == nil {
			w.add(r.w)
		}
	}
	if len(w.ws) < s.quorum {
		w.Close()
		return nil, s.failure(errs)
	}
	go func() {
		for ; n < len(s.masters); n++ {
			if r := <-results; r.err == nil {
				w.add(r.w)
			}
		}
	}()
	return w, nil
}

// watcher merges the watchers of the masters into one. A release seen on
// several masters wakes it once; the wake-ups it drops were the same
// release's.
type watcher struct {
	c    chan struct{}
	stop chan struct{}
	wg   sync.WaitGroup

	mu     sync.Mutex
	ws     []lock.Watcher
	closed bool
	last   int // the watcher whose wake-up was delivered last; -1 none
	expiry time.Time
	joined string
	notify func() // called when c receives (lock.Watcher's Notify)
}

// add starts forwarding mw's wake-ups, or closes mw if the watcher was
// closed meanwhile. A late watcher learns what the others were told.
func (w *watcher) add(mw lock.Watcher) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		mw.Close()
		return
	}
	if !w.expiry.IsZero() {
		mw.ExpectExpiry(w.expiry)
	}
	if w.joined != "" {
		mw.Join(w.joined)
	}
	w.ws = append(w.ws, mw)
	w.wg.Add(1)
	go w.forward(len(w.ws)-1, mw)
}

func (w *watcher) forward(i int, mw lock.Watcher) {
	defer w.wg.Done()
	for {
		select {
		case <-mw.C():
			// last is set before the wake-up can be read, so that a
			// PassOn right after it knows where it came from.
			w.mu.Lock()
			select {
			case w.c <- struct{}{}:
				w.last = i
				if w.notify != nil {
					w.notify()
				}
			default:
			}
			w.mu.Unlock()
		case <-w.stop:
			return
		}
	}
}

func (w *watcher) C() <-chan struct{} { return w.c }

func (w *watcher) Notify(f func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.notify = f
}

func (w *watcher) ExpectExpiry(at time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.expiry = at
	for _, mw := range w.ws {
		mw.ExpectExpiry(at)
	}
}

// PassOn gives the wake-up back to the master's watcher that delivered it,
// which hands it to the next waiter of this process.
func (w *watcher) PassOn() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.last >= 0 {
		w.ws[w.last].PassOn()
	}
}

func (w *watcher) Join(waiterID string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.joined = waiterID
	for _, mw := range w.ws {
		mw.Join(waiterID)
	}
}

// Close unregisters from every master. A wake-up delivered but not read
// goes to the next waiter, as a master's own watcher would pass it on: the
// masters' watchers have handed it over already.
func (w *watcher) Close() {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return
	}
	w.closed = true
	w.mu.Unlock()
	close(w.stop)
	w.wg.Wait()
	select {
	case <-w.c:
		w.PassOn()
	default:
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, mw := range w.ws {
		mw.Close()
	}
}

// List implements lock.Store. It walks the masters in turn, listing each
// with its own cursor, and shows a name once: on the first master (in
// order) that holds it, and only when a majority holds it. The cursor is
// "<master>.<that master's cursor>". A master that does not answer is
// passed over, so a listing while masters fail may show a name twice or
// miss one that changed during it, as a listing on one Redis may. A page
// ends where a master's page ends with a cursor, so, as on one Redis, it
// may be short or empty while it has a next cursor.
func (s *Store) List(ctx context.Context, req lock.ListRequest) (lock.ListPage, error) {
	limit := req.Limit
	if limit <= 0 {
		limit = 100
	}
	i, cursor := 0, ""
	if req.Cursor != "" {
		head, rest, ok := strings.Cut(req.Cursor, ".")
		n, err := strconv.Atoi(head)
		if !ok || err != nil || n < 0 || n >= len(s.masters) || rest == "" {
			return lock.ListPage{}, lock.Invalid(lock.FieldError{Field: "cursor", Detail: "not a cursor returned by this server"})
		}
		i, cursor = n, rest
		if rest == "0" {
			cursor = ""
		}
	}
	page := lock.ListPage{Locks: []lock.State{}}
	down := 0
	for i < len(s.masters) && len(page.Locks) < limit {
		p, err := call(ctx, s, i, func(ctx context.Context, m *redisstore.Store) (lock.ListPage, error) {
			return m.List(ctx, lock.ListRequest{Prefix: req.Prefix, Limit: limit - len(page.Locks), Cursor: cursor, Visible: req.Visible})
		})
		if lock.ErrorCode(err) == lock.CodeInvalid {
			return lock.ListPage{}, err
		}
		if err != nil {
			if ctx.Err() != nil {
				return lock.ListPage{}, ctx.Err()
			}
			if down++; len(s.masters)-down < s.quorum {
				return lock.ListPage{}, lock.Unavailable(err)
			}
			i, cursor = i+1, ""
			continue
		}
		for _, one := range p.Locks {
			states, err := s.inspectAll(ctx, one.Lock)
			if err != nil {
				return lock.ListPage{}, err
			}
			if first := firstHolding(states); first != i {
				continue // listed with an earlier master
			}
			if st := s.merge(one.Lock, states); st.Held {
				page.Locks = append(page.Locks, st)
			}
		}
		if p.NextCursor != "" {
			// The master's page ended on its limit or on its budget of
			// SCAN batches: so does this one, short or not, so that a
			// page's work stays bounded (redis.Store.List).
			cursor = p.NextCursor
			break
		}
		i, cursor = i+1, ""
	}
	if i < len(s.masters) {
		if cursor == "" {
			// The next master from its start: its own first cursor is "".
			cursor = "0"
		}
		page.NextCursor = strconv.Itoa(i) + "." + cursor
	}
	return page, nil
}

// firstHolding is the index of the first master whose state shows a
// holder, -1 if none.
func firstHolding(states []*lock.State) int {
	for i, st := range states {
		if st != nil && st.Held {
			return i
		}
	}
	return -1
}
