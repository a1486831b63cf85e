// Package eventfeed is the process's one feed of the lock event log: it
// fans one reading of the log out to the streams that watch it (GET
// /v1/events) and to the webhook workers: however many subscribe, one
// goroutine reads the log, with one blocking read at a time, and only while
// someone subscribes. cmd/lockapi makes one Feed per process and hands it
// to both.
//
// A subscriber gets every event after its resume point, in the log's order,
// each once. It starts in one of two ways: from the next event (no resume
// point), or from a resume point, catching up with pages of the log and
// then joining the live feed. The hand-over cannot lose or repeat an event:
// the subscriber joins the live feed first, buffering, then reads the log
// until it reaches the first buffered event (or the log's end), and drops
// by id whatever it has already returned.
//
// A slow subscriber never holds up the others: its live buffer is bounded,
// and when the reader finds it full the subscriber leaves the live feed and
// catches up from the log by itself, exactly as a resumed subscriber does,
// until it is back. Only if it falls behind what the log keeps does it fail,
// with lock.CodeEventsGone.
//
// A log that has recorded nothing yet gives no position to start from but
// its oldest event (ReadEvents after ""), which cannot tell that events
// were trimmed: should a log that was empty when the reader started trim
// events before the reader's first read (it would have to record more than
// it keeps in between), those are skipped unnoticed.
package eventfeed

import (
	"context"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/lockapi/lockapi/internal/clock"
	"github.com/lockapi/lockapi/internal/lock"
)

// Defaults for the zero fields of Options.
const (
	DefaultBuffer     = 256
	DefaultPage       = 100
	DefaultRetryPause = time.Second
)

// minRetryPause is the reader's first pause after a failed read; it doubles
// up to Options.RetryPause.
const minRetryPause = 50 * time.Millisecond

// Options tunes a Feed. Zero fields get the defaults.
type Options struct {
	// Buffer is how many live events a subscriber may have waiting before
	// it leaves the live feed to catch up from the log by itself (256).
	Buffer int
	// Page is the most events one read of the log returns (100).
	Page int
	// RetryPause is the longest pause of the reader after a failed read of
	// the log (1s); the pauses start at 50ms and double.
	RetryPause time.Duration
	// Logger reports the reader's failed reads.
	Logger zerolog.Logger
}

// ErrClosed is the error of a Subscribe or Next on a closed Feed, and of
// Next on a closed Subscription: the server is shutting down.
var ErrClosed = &lock.Error{Code: lock.CodeUnavailable, Detail: "the event feed is closed"}

// Feed is one process's reader of an event log, shared by its subscribers.
// It is safe for concurrent use.
type Feed struct {
	log  lock.EventLog
	opts Options

	mu     sync.Mutex
	closed bool
	// open counts open subscriptions: the reader runs while there are any.
	open int
	// live holds the inboxes of the subscribers on the live feed.
	live map[*inbox]struct{}
	// gen is the running reader's generation; a reader of an older one
	// has been stopped and delivers nothing more.
	gen  uint64
	stop context.CancelFunc // stops the running reader; nil when none runs
	wg   sync.WaitGroup     // the readers' goroutines
}

// inbox is a subscriber's buffer on the live feed. Only the reader sends
// to ch, under Feed.mu; it closes ch when it takes the inbox off the feed
// (the subscriber fell behind, the reader lost its place, or the feed
// closed). What ch holds then is still a gapless run of the feed.
type inbox struct {
	ch     chan lock.Event
	filter lock.EventFilter
}

// New returns a feed of log. It starts no goroutine until someone
// subscribes.
func New(log lock.EventLog, opts Options) *Feed {
	if opts.Buffer <= 0 {
		opts.Buffer = DefaultBuffer
	}
	if opts.Page <= 0 {
		opts.Page = DefaultPage
	}
	if opts.RetryPause <= 0 {
		opts.RetryPause = DefaultRetryPause
	}
	return &Feed{log: log, opts: opts, live: make(map[*inbox]struct{})}
}

// Close ends every subscription (their Next fails with ErrClosed once they
// have returned what they had) and stops the reader.
func (f *Feed) Close() {
	f.mu.Lock()
	f.closed = true
	f.stopLocked()
	f.dropLocked()
	f.mu.Unlock()
	f.wg.Wait()
}

// Subscribe starts a subscription to the events that pass filter. With
// after "" it begins with the next event recorded; otherwise with the
// event after the one whose id is after, which must be a valid event id
// (lock.ParseEventID). A resume point older than the log keeps fails here
// with lock.CodeEventsGone, as do failures of the log.
//
// Close the subscription when done: the reader runs while any is open.
func (f *Feed) Subscribe(ctx context.Context, after string, filter lock.EventFilter) (*Subscription, error) {
	return f.subscribe(ctx, after, after == "", filter)
}

// SubscribeFromOldest is Subscribe from the oldest event the log keeps:
// for a reader without a resume point that must miss nothing (a webhook
// whose cursor was recorded while the log was empty, or was gone).
func (f *Feed) SubscribeFromOldest(ctx context.Context, filter lock.EventFilter) (*Subscription, error) {
	return f.subscribe(ctx, "", false, filter)
}

// subscribe starts a subscription after after, or, when next, with the
// next event recorded.
func (f *Feed) subscribe(ctx context.Context, after string, next bool, filter lock.EventFilter) (*Subscription, error) {
	if err := f.join(ctx); err != nil {
		return nil, err
	}
	s := &Subscription{feed: f, filter: filter, last: after}
	if err := s.attach(); err != nil {
		s.Close()
		return nil, err
	}
	if next {
		// Every event recorded after this id reaches the inbox, which is on
		// the feed already; any event up to it that reaches it is dropped.
		id, err := f.log.LastEventID(ctx)
		if err != nil {
			s.Close()
			return nil, err
		}
		s.last, s.live = id, true
		return s, nil
	}
	// The first page now, so that a resume point the log no longer keeps
	// fails the subscription rather than its first Next.
	page, err := f.log.ReadEvents(ctx, after, f.opts.Page)
	if err != nil {
		s.Close()
		return nil, err
	}
	s.page, s.live = page, len(page) == 0
	return s, nil
}

// join counts a new subscription and makes sure the reader runs.
func (f *Feed) join(ctx context.Context) error {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return ErrClosed
	}
	f.open++
	running := f.stop != nil
	f.mu.Unlock()
	if running {
		return nil
	}
	// The reader must start where no subscriber has looked yet: it is
	// placed before any subscriber of its generation joins the live feed,
	// so every event recorded after a subscriber joins reaches its inbox.
	pos, err := f.log.LastEventID(ctx)
	f.mu.Lock()
	defer f.mu.Unlock()
	if err == nil && f.closed {
		err = ErrClosed
	}
	if err != nil {
		f.leaveLocked()
		return err
	}
	if f.stop == nil {
		f.gen++
		ctx, stop := context.WithCancel(context.Background())
		f.stop = stop
		f.wg.Add(1)
		go f.read(ctx, f.gen, pos)
	}
	return nil
}

// leaveLocked uncounts a subscription and stops the reader after the last.
func (f *Feed) leaveLocked() {
	f.open--
	if f.open == 0 {
		f.stopLocked()
	}
}

func (f *Feed) stopLocked() {
	if f.stop != nil {
		f.stop()
		f.stop = nil
		f.gen++
	}
}

// dropLocked takes every inbox off the live feed: their subscribers catch
// up from the log by themselves.
func (f *Feed) dropLocked() {
	for ib := range f.live {
		close(ib.ch)
	}
	clear(f.live)
}

// read is the reader: it waits for the events after pos and hands each to
// every inbox on the live feed, until ctx ends.
func (f *Feed) read(ctx context.Context, gen uint64, pos string) {
	defer f.wg.Done()
	pause := minRetryPause
	for {
		evs, err := f.log.WaitEvents(ctx, pos, f.opts.Page)
		if ctx.Err() != nil {
			return
		}
		if lock.ErrorCode(err) == lock.CodeEventsGone {
			// The reader fell behind what the log keeps. It starts again at
			// the log's end, and the subscribers, which it can no longer
			// serve without a gap, catch up by themselves: they fail only
			// if they too are past what the log keeps.
			var newPos string
			if newPos, err = f.log.LastEventID(ctx); err == nil {
				f.mu.Lock()
				if f.gen == gen {
					f.dropLocked()
				}
				f.mu.Unlock()
				pos = newPos
				continue
			}
		}
		if err != nil {
			f.opts.Logger.Warn().Err(err).Dur("retry_in", pause).Msg("read the event log")
			if !clock.Sleep(ctx, pause) {
				return
			}
			pause = min(2*pause, f.opts.RetryPause)
			continue
		}
		pause = minRetryPause
		if len(evs) == 0 {
			continue
		}
		f.mu.Lock()
		if f.gen != gen {
			f.mu.Unlock()
			return
		}
		f.deliverLocked(evs)
		f.mu.Unlock()
		for _, e := range evs {
			if !e.Late { // a late event is before pos already
				pos = e.ID
			}
		}
	}
}

// deliverLocked hands evs to every inbox on the live feed whose filter they
// pass. An inbox with no room is taken off the feed, never waited for.
func (f *Feed) deliverLocked(evs []lock.Event) {
	for ib := range f.live {
		for _, e := range evs {
			if !ib.filter.Match(e) {
				continue
			}
			select {
			case ib.ch <- e:
				continue
			default:
			}
			close(ib.ch)
			delete(f.live, ib)
			break
		}
	}
}

// Subscription is one subscriber's place in the log. Its methods are not
// safe for concurrent use: one goroutine calls Next, then Close.
type Subscription struct {
	feed   *Feed
	filter lock.EventFilter
	// last is the subscription's position in the log: every event up to
	// it has been returned or did not pass the filter. "" before the
	// first event of a log that had none: ReadEvents reads it from its
	// oldest event.
	last string
	// ib is the inbox on the live feed; nil when the subscription is off
	// it (it joins again at its next Next).
	ib *inbox
	// live is true when the subscription has caught up: its next events
	// come from ib. Otherwise it reads pages of the log.
	live bool
	// first is the first event that arrived in ib while catching up: the
	// catch-up is over when the log has been read up to it.
	first *lock.Event
	// page holds events read (from the log or ib) and not yet returned.
	page   []lock.Event
	err    error // sticky: events gone, or closed
	closed bool
}

// Next returns the next event that passes the filter, waiting for one
// until ctx ends. It fails with lock.CodeEventsGone when the subscription
// fell behind what the log keeps, and with ErrClosed after Close or the
// feed's Close; these failures are final. Other errors (ctx's, the log's)
// are not: Next may be called again and goes on where it was.
func (s *Subscription) Next(ctx context.Context) (lock.Event, error) {
	for {
		for len(s.page) > 0 {
			e := s.page[0]
			s.page = s.page[1:]
			switch {
			case e.Late:
				// Out of order (lock.Event.Late): delivered, leaving the
				// position where it is.
			case s.last != "" && lock.CompareEventIDs(e.ID, s.last) <= 0:
				continue // returned already, from the log or the feed
			default:
				s.last = e.ID
			}
			if s.filter.Match(e) {
				return e, nil
			}
		}
		if s.err != nil {
			return lock.Event{}, s.err
		}
		if s.ib == nil {
			// Off the live feed (fallen behind, or the reader lost its
			// place): join it again, and catch up from the log meanwhile.
			if err := s.attach(); err != nil {
				s.err = err
				continue
			}
			s.live, s.first = false, nil
		}

		if s.live {
			select {
			case e, ok := <-s.ib.ch:
				if !ok {
					s.ib, s.live = nil, false
					continue
				}
				s.page = append(s.page, e)
			case <-ctx.Done():
				return lock.Event{}, context.Cause(ctx)
			}
			continue
		}

		// Catching up: read the log until it reaches the first event that
		// arrived in the inbox, or its end.
		if s.first == nil {
			select {
			case e, ok := <-s.ib.ch:
				if !ok {
					s.ib = nil
					continue
				}
				s.first = &e
			default:
			}
		}
		if s.first != nil && s.last != "" && lock.CompareEventIDs(s.last, s.first.ID) >= 0 {
			s.goLive()
			continue
		}
		page, err := s.feed.log.ReadEvents(ctx, s.last, s.feed.opts.Page)
		if err != nil {
			if lock.ErrorCode(err) == lock.CodeEventsGone {
				s.err = err
			}
			return lock.Event{}, err
		}
		if len(page) == 0 {
			s.goLive()
			continue
		}
		s.page = page
	}
}

// goLive ends the catch-up: what follows comes from the inbox, starting
// with first.
func (s *Subscription) goLive() {
	s.live = true
	if s.first != nil {
		s.page = append(s.page, *s.first)
		s.first = nil
	}
}

// attach puts a fresh inbox on the live feed.
func (s *Subscription) attach() error {
	f := s.feed
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return ErrClosed
	}
	s.ib = &inbox{ch: make(chan lock.Event, f.opts.Buffer), filter: s.filter}
	f.live[s.ib] = struct{}{}
	return nil
}

// Close ends the subscription. It is safe to call more than once.
func (s *Subscription) Close() {
	if s.closed {
		return
	}
	s.closed = true
	f := s.feed
	f.mu.Lock()
	if _, ok := f.live[s.ib]; ok {
		delete(f.live, s.ib)
		close(s.ib.ch)
	}
	f.leaveLocked()
	f.mu.Unlock()
	s.ib, s.page, s.first = nil, nil, nil
	s.err = ErrClosed
}
