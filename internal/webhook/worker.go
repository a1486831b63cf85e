package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/lockapi/lockapi/internal/clock"
	"github.com/lockapi/lockapi/internal/eventfeed"
	"github.com/lockapi/lockapi/internal/lock"
)

const (
	// leasePrincipal is the principal of the workers' leases.
	leasePrincipal = "lockapi"
	// leaseWait is how long one wait for a subscription's lease lasts
	// before the worker waits again (it wakes at once when the lease is
	// released or expires).
	leaseWait = time.Minute
	// batch is how many events one read of the log returns at most.
	batch = 100
	// persistEvery is how often a cursor that moved past events the
	// subscription skips is recorded; a delivered event is recorded at
	// once.
	persistEvery = 10 * time.Second
	// stateRetry spaces the tries of a State or log call that failed.
	stateRetryMin, stateRetryMax = 100 * time.Millisecond, 5 * time.Second
	// callTimeout bounds a store call made when the worker's context may
	// already be over (releasing the lease).
	callTimeout = 5 * time.Second
)

// worker delivers one subscription's events, in log order, while it holds
// the subscription's lease.
type worker struct {
	svc  *Service
	sub  Subscription
	log  zerolog.Logger
	stop func()
	// wake is poked when a replay may have been queued: on this instance,
	// or on another that the State's notice tells of.
	wake chan struct{}

	// retrying is true while the event at hand failed and waits for its
	// next attempt; head is the time (unix ns) of the event at hand, 0
	// while there is none. Read by the metrics.
	retrying atomic.Bool
	head     atomic.Int64

	// tried is whether the worker made an attempt yet, and streak how
	// many of the last attempts failed in a row, over every event: the
	// slots an attempt may take (kind) and the backoff after a failure
	// are the webhook's, not the event's. Only the delivering goroutine
	// uses them.
	tried  bool
	streak int
}

// kind classes the worker's next attempt for the sender.
func (w *worker) kind() kind {
	switch {
	case !w.tried:
		return kindNew
	case w.streak > 0:
		return kindFailing
	}
	return kindLive
}

func startWorker(ctx context.Context, svc *Service, sub Subscription) *worker {
	ctx, cancel := context.WithCancel(ctx)
	w := &worker{
		svc:  svc,
		sub:  sub,
		log:  svc.log.With().Str("component", "webhook").Str("webhook", sub.ID).Logger(),
		wake: make(chan struct{}, 1),
	}
	done := make(chan struct{})
	w.stop = func() { cancel(); <-done }
	go func() {
		defer close(done)
		w.run(ctx)
	}()
	return w
}

func (w *worker) poke() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// workerLease is the acquire of the worker of subscription id, which New
// validates.
func workerLease(id string, cfg Config) lock.AcquireRequest {
	return lock.AcquireRequest{Lock: LeaseName(id), Owner: cfg.Owner, Principal: leasePrincipal, TTL: cfg.LeaseTTL}
}

// run takes the subscription's lease whenever it is free, and delivers
// while it holds it, until ctx ends.
func (w *worker) run(ctx context.Context) {
	req := workerLease(w.sub.ID, w.svc.cfg)
	retry := newRetry()
	for ctx.Err() == nil {
		g, err := lock.AcquireWait(ctx, w.svc.cfg.Store, req, leaseWait)
		switch {
		case err == nil:
			retry.reset()
			w.log.Info().Uint64("token", g.Lease.Token).Msg("webhook worker took the subscription's lease: delivering from this instance")
			w.hold(ctx, g.Lease)
		case ctx.Err() != nil:
			return
		case lock.ErrorCode(err) == lock.CodeHeld:
			// Another instance delivers; wait again.
		default:
			w.log.Warn().Err(err).Msg("webhook worker cannot take its lease")
			retry.sleep(ctx)
		}
	}
}

// hold delivers while the lease lives: a goroutine renews it, and ends the
// delivery when the lease is lost. On the way out the lease is released,
// so another instance takes over at once.
func (w *worker) hold(ctx context.Context, lease lock.Lease) {
	hctx, cancel := context.WithCancel(ctx)
	renewed := make(chan struct{})
	go func() {
		defer close(renewed)
		w.renew(hctx, cancel, lease)
	}()
	w.deliver(hctx)
	cancel()
	<-renewed
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), callTimeout)
	defer rcancel()
	_, err := w.svc.cfg.Store.Release(rctx, lock.LeaseRef{Lock: lease.Lock, ID: lease.ID}, true)
	if err != nil && lock.ErrorCode(err) != lock.CodeLeaseLost {
		w.log.Debug().Err(err).Msg("webhook worker could not release its lease; it expires")
	}
}

// renew renews the lease every third of its TTL until ctx ends. When the
// lease is lost, or cannot be renewed before it would have expired, it
// calls lost: another instance may deliver from then on.
func (w *worker) renew(ctx context.Context, lost context.CancelFunc, lease lock.Lease) {
	ttl := w.svc.cfg.LeaseTTL
	validUntil := time.Now().Add(ttl)
	every := ttl / 3
	t := time.NewTimer(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		rctx, cancel := context.WithTimeout(ctx, min(callTimeout, time.Until(validUntil)))
		start := time.Now()
		_, err := w.svc.cfg.Store.Renew(rctx, lock.LeaseRef{Lock: lease.Lock, ID: lease.ID}, ttl)
		cancel()
		switch {
		case err == nil:
			validUntil = start.Add(ttl)
			t.Reset(every)
		case ctx.Err() != nil:
			return
		case lock.ErrorCode(err) == lock.CodeLeaseLost:
			w.log.Warn().Msg("webhook worker lost its lease: another instance delivers now")
			lost()
			return
		case time.Until(validUntil) <= 0:
			w.log.Warn().Err(err).Msg("webhook worker could not renew its lease in time: it stops delivering")
			lost()
			return
		default:
			t.Reset(min(every, max(time.Until(validUntil)/4, 10*time.Millisecond)))
		}
	}
}

// deliver reads the log from the cursor and delivers what the
// subscription selects, until ctx ends. It reads through the process's
// event feed (Config.Feed): one reader of the log serves every worker and
// event stream, and a worker whose receiver is slow falls off the live
// feed and catches up from the log without holding up the others.
func (w *worker) deliver(ctx context.Context) {
	cursor, ok := w.cursor(ctx)
	if !ok {
		return
	}
	persisted, persistedAt := cursor, time.Now()
	persist := func() {
		if err := w.svc.cfg.State.SetCursor(ctx, w.sub.ID, cursor); err != nil {
			if ctx.Err() == nil {
				w.log.Warn().Err(err).Str("cursor", cursor).Msg("webhook worker cannot record its cursor; it tries again after the next event")
			}
			return
		}
		persisted, persistedAt = cursor, time.Now()
	}
	var feed *eventfeed.Subscription
	defer func() {
		if feed != nil {
			feed.Close()
		}
	}()
	retry := newRetry()
	lookForReplays := true
	for ctx.Err() == nil {
		if lookForReplays && !w.replays(ctx) {
			return
		}
		var err error
		if feed == nil {
			feed, err = w.subscribe(ctx, cursor)
		}
		var e lock.Event
		got := false
		if err == nil {
			// Replays queued on any instance wake the worker (Service.Run
			// pokes it on the State's notice); the wait's end is the
			// safety net for a notice lost.
			wctx, cancel := context.WithTimeout(ctx, w.svc.cfg.Refresh)
			var poked bool
			e, poked, err = w.next(wctx, feed)
			polled := wctx.Err() != nil && ctx.Err() == nil
			cancel()
			got = err == nil
			lookForReplays = poked || polled
			if !got && lookForReplays {
				err = nil // no event: the wait ended for the replays
			}
		}
		switch {
		case ctx.Err() != nil:
			return
		case lock.ErrorCode(err) == lock.CodeEventsGone:
			w.log.Error().Err(err).Str("cursor", cursor).Msg("webhook worker's cursor is older than the event log keeps: the events in between are lost to this subscription; it goes on from the oldest kept")
			if feed != nil {
				feed.Close()
			}
			feed, cursor = nil, ""
			continue
		case err != nil:
			w.log.Warn().Err(err).Msg("webhook worker cannot read the event log")
			retry.sleep(ctx)
			continue
		}
		retry.reset()
		if got && !w.take(ctx, e, &cursor, persist) {
			return
		}
		if cursor != persisted && time.Since(persistedAt) >= persistEvery {
			persist()
		}
	}
}

// take delivers e if the subscription selects it and moves the cursor past
// it; false when ctx ended first.
func (w *worker) take(ctx context.Context, e lock.Event, cursor *string, persist func()) bool {
	next := *cursor
	if !e.Late { // a late event is before the cursor already
		next = e.ID
	}
	// An event this version cannot read (written by a newer one: the
	// store counted and logged it, docs/UPGRADING.md) is passed over as
	// one the subscription does not select.
	if e.UnknownLayout != "" || !w.sub.Match(e) {
		*cursor = next
		return true
	}
	if !w.deliverOne(ctx, e.ID, payload(e), e.Time, true) {
		return false
	}
	*cursor = next
	persist()
	return true
}

// subscribe joins the feed after cursor; "" reads from the oldest event
// the log keeps, as a cursor recorded while the log was empty, or reset
// because it was gone, asks.
func (w *worker) subscribe(ctx context.Context, cursor string) (*eventfeed.Subscription, error) {
	if cursor == "" {
		return w.svc.feed.SubscribeFromOldest(ctx, lock.EventFilter{})
	}
	return w.svc.feed.Subscribe(ctx, cursor, lock.EventFilter{})
}

// next waits for the feed's next event. poked reports that a replay may be
// waiting: the wait ended for it (err is then ctx's), or the event came
// first.
func (w *worker) next(ctx context.Context, feed *eventfeed.Subscription) (e lock.Event, poked bool, err error) {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var woken atomic.Bool
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		select {
		case <-w.wake:
			woken.Store(true)
			cancel()
		case <-stop:
		}
	}()
	e, err = feed.Next(wctx)
	close(stop)
	<-done
	if woken.Load() && err != nil {
		// The wake cancelled the read: no event, and no failure either
		// unless ctx itself ended. err must stay non-nil, or the caller
		// would deliver the empty event as if one had been read.
		err = ctx.Err()
		if err == nil {
			err = errWoken
		}
	}
	return e, woken.Load(), err
}

// errWoken is next's answer when a replay notice ended the wait before an
// event came.
var errWoken = errors.New("webhook worker woken for replays")

// cursor returns where the subscription's delivery stands. A subscription
// without one (from the file, delivered for the first time) starts after
// the newest event.
func (w *worker) cursor(ctx context.Context) (string, bool) {
	retry := newRetry()
	for ctx.Err() == nil {
		cursor, ok, err := w.svc.cfg.State.Cursor(ctx, w.sub.ID)
		if err == nil && !ok {
			if cursor, err = w.svc.cfg.Log.LastEventID(ctx); err == nil {
				err = w.svc.cfg.State.SetCursor(ctx, w.sub.ID, cursor)
			}
		}
		if err == nil {
			return cursor, true
		}
		if ctx.Err() == nil {
			w.log.Warn().Err(err).Msg("webhook worker cannot read its cursor")
		}
		retry.sleep(ctx)
	}
	return "", false
}

// replays delivers the dead letters queued for replay; false when ctx
// ended first.
func (w *worker) replays(ctx context.Context) bool {
	for {
		rs, err := w.lookForReplays(ctx)
		if err != nil {
			if ctx.Err() == nil {
				w.log.Warn().Err(err).Msg("webhook worker cannot read its replays")
			}
			return ctx.Err() == nil // the next round tries again
		}
		if len(rs) == 0 {
			return true
		}
		for _, d := range rs {
			if !w.deliverOne(ctx, d.EventID, d.Payload, time.Now(), false) {
				return false
			}
			if err := w.svc.cfg.State.DoneReplay(ctx, w.sub.ID, d.EventID); err != nil {
				// Delivered again by the next round: at least once.
				return ctx.Err() == nil
			}
		}
	}
}

// lookForReplays reads up to a batch of the subscription's replays once a
// look is free (Service.replayLooks).
func (w *worker) lookForReplays(ctx context.Context) ([]DeadLetter, error) {
	select {
	case w.svc.replayLooks <- struct{}{}:
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
	defer func() { <-w.svc.replayLooks }()
	return w.svc.cfg.State.Replays(ctx, w.sub.ID, batch)
}

// deliverOne delivers one message until the receiver takes it or the
// retry period that began at since ends, when it becomes a dead letter.
// It reports false only when ctx ended first: the message is then neither
// delivered nor given up, and whoever delivers next tries it again.
func (w *worker) deliverOne(ctx context.Context, id string, body []byte, since time.Time, fromLog bool) bool {
	w.head.Store(since.UnixNano())
	defer func() {
		w.head.Store(0)
		w.retrying.Store(false)
	}()
	deadline := since.Add(w.svc.cfg.RetryFor)
	failures := 0
	for {
		a := w.svc.send.send(ctx, w.sub, id, body, w.kind())
		if ctx.Err() != nil {
			// Cut short by shutdown or a lost lease: not the
			// receiver's failure.
			return false
		}
		w.svc.observe(a.Outcome)
		w.tried = true
		if a.OK() {
			w.streak = 0
			return true
		}
		failures++
		w.streak++
		ev := w.log.Info()
		if failures > 1 {
			ev = w.log.Debug()
		}
		ev.Str("event", id).Str("outcome", string(a.Outcome)).Int("status", a.Status).Err(a.Err).Int("failures", failures).Msg("webhook delivery failed")
		if !time.Now().Before(deadline) {
			return w.bury(ctx, DeadLetter{EventID: id, Payload: json.RawMessage(body), Attempts: failures,
				LastStatus: a.Status, LastError: errText(a.Err), FailedAt: time.Now().UTC()})
		}
		w.retrying.Store(true)
		// The webhook's streak, not the event's failures: a receiver
		// that failed the events before this one is not tried every
		// Backoff.Min again.
		wait := max(w.svc.cfg.Backoff.Delay(w.streak), min(a.RetryAfter, w.svc.cfg.Backoff.Max))
		// The last attempt is made when the period ends, not after.
		wait = min(wait, max(time.Until(deadline), 0))
		if !clock.Sleep(ctx, wait) {
			return false
		}
	}
}

// bury keeps a message the worker gave up on as a dead letter; false when
// ctx ended before it was kept.
func (w *worker) bury(ctx context.Context, d DeadLetter) bool {
	retry := newRetry()
	for {
		err := w.svc.cfg.State.AddDeadLetter(ctx, w.sub.ID, d)
		if err == nil {
			w.svc.observe(OutcomeDeadLetter)
			w.log.Warn().Str("event", d.EventID).Int("attempts", d.Attempts).Str("last_error", d.LastError).Msg("webhook delivery given up: the event is a dead letter now")
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		w.log.Warn().Err(err).Str("event", d.EventID).Msg("webhook worker cannot keep a dead letter")
		if !retry.sleep(ctx) {
			return false
		}
	}
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// retry spaces the tries of a failing store call: full jitter, doubling
// from stateRetryMin to stateRetryMax.
type retry struct{ failures int }

func newRetry() *retry  { return &retry{} }
func (r *retry) reset() { r.failures = 0 }
func (r *retry) sleep(ctx context.Context) bool {
	r.failures++
	return clock.Sleep(ctx, Backoff{Min: stateRetryMin, Max: stateRetryMax}.Delay(r.failures)+stateRetryMin/10)
}
