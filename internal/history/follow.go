package history

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/lockapi/lockapi/internal/clock"
	"github.com/lockapi/lockapi/internal/eventfeed"
	"github.com/lockapi/lockapi/internal/lock"
)

// fillPage is how many events one read of the fill asks for.
const fillPage = 1000

// sweepEvery is how often the window forgets what left the span.
const sweepEvery = time.Minute

// retryPause is the pause after a failed read or subscription.
const retryPause = time.Second

// run fills the window from log, then follows feed until ctx ends.
func (w *Window) run(ctx context.Context, feed *eventfeed.Feed, log lock.EventLog) {
	after, empty := w.fill(ctx, log)
	close(w.ready)
	swept := make(chan struct{})
	go func() {
		defer close(swept)
		w.sweepEvery(ctx)
	}()
	defer func() { <-swept }()
	for ctx.Err() == nil {
		var sub *eventfeed.Subscription
		var err error
		switch {
		case after != "":
			sub, err = feed.Subscribe(ctx, after, lock.EventFilter{})
		case empty:
			// The log was empty when the fill read it: whatever it holds
			// now came after.
			sub, err = feed.SubscribeFromOldest(ctx, lock.EventFilter{})
		default:
			sub, err = feed.Subscribe(ctx, "", lock.EventFilter{})
		}
		if lock.ErrorCode(err) == lock.CodeEventsGone {
			// What followed the fill is gone already: go on from now,
			// forgetting the leases whose ends may be in the gap.
			w.opts.Logger.Warn().Str("after", after).Msg("history: events were trimmed before they were read; the window has a gap")
			w.forgetLive()
			after, empty = "", false
			continue
		}
		if errors.Is(err, eventfeed.ErrClosed) {
			return
		}
		if err != nil {
			if ctx.Err() == nil {
				w.opts.Logger.Warn().Err(err).Msg("history: follow the event feed")
			}
			if !clock.Sleep(ctx, retryPause) {
				return
			}
			continue
		}
		if after = w.follow(ctx, sub, after); after == "" {
			empty = false // a gap: go on from now
		}
		sub.Close()
	}
}

// follow takes in sub's events until ctx ends or sub fails for good, and
// returns the id of the last event taken in ("" after a gap).
func (w *Window) follow(ctx context.Context, sub *eventfeed.Subscription, after string) string {
	for {
		e, err := sub.Next(ctx)
		switch {
		case err == nil:
			w.Add(e)
			if w.opts.Added != nil {
				w.opts.Added(e)
			}
			if !e.Late {
				after = e.ID
			}
			continue
		case ctx.Err() != nil:
			return after
		case lock.ErrorCode(err) == lock.CodeEventsGone:
			w.opts.Logger.Warn().Err(err).Msg("history: fell behind the event log; the window has a gap")
			w.forgetLive()
			return ""
		case errors.Is(err, eventfeed.ErrClosed):
			return after
		}
		w.opts.Logger.Warn().Err(err).Msg("history: read the event feed")
		if !clock.Sleep(ctx, retryPause) {
			return after
		}
	}
}

// fill reads the log back from its newest event, at most Options.Fill
// events or until one older than the span, takes them in oldest first, and
// returns the newest one's id; "" for none, with empty set when the log
// had none (rather than failed to answer).
func (w *Window) fill(ctx context.Context, log lock.EventLog) (newest string, empty bool) {
	since := w.opts.Now().Add(-w.opts.Span)
	var got []lock.Event
	before := ""
	failed := false
	for len(got) < w.opts.Fill {
		page, err := log.ReadEventsBefore(ctx, before, min(fillPage, w.opts.Fill-len(got)))
		if err != nil {
			if ctx.Err() == nil {
				w.opts.Logger.Warn().Err(err).Msg("history: read the event log at start; the window starts with what it read")
			}
			failed = true
			break
		}
		got = append(got, page...)
		if len(page) == 0 || page[len(page)-1].Time.Before(since) {
			break
		}
		before = page[len(page)-1].ID
	}
	if len(got) == 0 {
		return "", !failed
	}
	slices.Reverse(got)
	w.mu.Lock()
	for _, e := range got {
		if !e.Time.Before(since) {
			w.addLocked(e)
		}
	}
	w.mu.Unlock()
	return got[len(got)-1].ID, false
}

func (w *Window) sweepEvery(ctx context.Context) {
	for clock.Sleep(ctx, sweepEvery) {
		w.sweep()
	}
}
