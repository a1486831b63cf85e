package ui

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/lockapi/lockapi/internal/auth"
	"github.com/lockapi/lockapi/internal/lock"
)

// feed is the events a page shows: the recent ones, rendered with the
// page, and the live ones its script adds from GET /ui/events.
type feed struct {
	// Events are the recent events, newest first.
	Events []eventView
	// EventsNote says why events are missing or incomplete, "" when they
	// are not.
	EventsNote string
	// FeedLock and FeedPrefix select the live feed's events, FeedAfter is
	// where it continues: after the newest event the page was rendered
	// with.
	FeedLock, FeedPrefix, FeedAfter string
}

// eventView is one event as the pages show it. The lease id, an admin's
// capability, is never shown.
type eventView struct {
	ID        string
	Type      lock.EventType
	Lock      string
	Owner     string
	Principal string
	Mode      lock.Mode
	Token     uint64
	HoldCount int
	Time      string
	// Metadata is an updated event's new metadata, "k=v, k=v" in key
	// order ("{}" for none); "" on the other types.
	Metadata string
}

// How the pages find recent events: they read the log backwards from its
// newest event (LastEventID, where the live feed continues, so that every
// event is on the page or in the feed), scanPage events at a time, until
// they have recentEvents that the page shows or have read scanLimit.
const (
	recentEvents = 20
	scanLimit    = 2000
	scanPage     = 500
)

// errNoEventLog is the note of a store that records no events.
var errNoEventLog = errors.New("this store does not record events yet")

// feed returns the recent events of the names f selects that the session
// may read, and where the live feed continues.
func (h *Handler) feed(ctx context.Context, s session, f lock.EventFilter) feed {
	out := feed{FeedLock: f.Lock, FeedPrefix: f.Prefix}
	keep := func(e lock.Event) bool {
		return e.UnknownLayout == "" && f.Match(e) && s.may(auth.ScopeRead, e.Lock) && !lock.Reserved(e.Lock)
	}
	events, last, partial, err := h.recent(ctx, keep)
	out.FeedAfter = last
	switch {
	case err != nil:
		out.EventsNote = "Events unavailable: " + errDetail(err)
	case partial:
		out.EventsNote = fmt.Sprintf("The event log is busy: these are this page's events among the newest %d of the log; older ones are not shown.", scanLimit)
	}
	for _, e := range events {
		out.Events = append(out.Events, eventView{
			ID: e.ID, Type: e.Type, Lock: e.Lock, Owner: e.Owner, Principal: e.Principal, Mode: e.Mode,
			Token: e.Token, HoldCount: e.HoldCount, Time: e.Time.UTC().Format(timeFormat),
			Metadata: eventMetadata(e),
		})
	}
	return out
}

// recent returns up to recentEvents events that keep passes, newest first,
// up to and including the log's newest id, last, which it returns too;
// partial is true when it read scanLimit events without finding
// recentEvents that keep passes and the log holds older ones.
func (h *Handler) recent(ctx context.Context, keep func(lock.Event) bool) (events []lock.Event, last string, partial bool, err error) {
	log := h.store.Events()
	if log == nil {
		return nil, "", false, errNoEventLog
	}
	if last, err = log.LastEventID(ctx); err != nil || last == "" {
		return nil, last, false, err
	}
	before := ""
	for read := 0; ; read += scanPage {
		if read >= scanLimit {
			return events, last, true, nil
		}
		batch, err := log.ReadEventsBefore(ctx, before, scanPage)
		if err != nil {
			return nil, last, false, err
		}
		for _, e := range batch {
			// Newer than last: recorded since, and the live feed's.
			if lock.CompareEventIDs(e.ID, last) <= 0 && keep(e) {
				if events = append(events, e); len(events) == recentEvents {
					return events, last, false, nil
				}
			}
		}
		if len(batch) < scanPage {
			return events, last, false, nil // the oldest event kept
		}
		before = batch[len(batch)-1].ID
	}
}

func errDetail(err error) string {
	if errors.Is(err, errNoEventLog) {
		return err.Error() + "."
	}
	return lock.AsError(err).Detail + "."
}

// handleEvents handles the "GET /ui/events" route: the API's GET /v1/events
// (Server-Sent Events) for this session. A browser's EventSource cannot
// send an Authorization header, and the session holds no key, so the
// dashboard asks the API as the session's key (auth.WithKey) and passes
// its answer on as it is: the same stream, the same filtering by the key's
// patterns, the same errors (404 or 501 while the server has no events,
// which the script shows as unavailable).
func (h *Handler) handleEvents(w http.ResponseWriter, r *http.Request, s session) {
	// A request of its own, not a clone: the API routes it afresh.
	ctx, cancel := h.feedContext(r, s)
	defer cancel()
	defer context.AfterFunc(r.Context(), cancel)()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "/v1/events?"+r.URL.RawQuery, nil)
	if err != nil {
		h.fail(w, r, http.StatusBadRequest, "Bad query.")
		return
	}
	req.RemoteAddr, req.TLS, req.Host = r.RemoteAddr, r.TLS, r.Host
	req.Header.Set("Accept", "text/event-stream")
	if id := r.Header.Get("Last-Event-ID"); id != "" {
		req.Header.Set("Last-Event-ID", id)
	}
	if s.key != nil {
		// The session holds no key to send: the API takes the session's
		// key from the request's context, which only this process sets.
		req = req.WithContext(auth.WithKey(req.Context(), s.key))
	}
	h.api.ServeHTTP(w, req)
}

// feedContext is the context of s's live feed: the API's stream outlives
// neither the session's expiry nor its sign-out, which is checked every
// h.feedCheck (on every instance alike: a sign-out on another instance
// ends this one's feeds too). A check that fails ends the feed, as a
// session that cannot be checked is none (session).
func (h *Handler) feedContext(r *http.Request, s session) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	if !s.expires.IsZero() {
		var stop context.CancelFunc
		ctx, stop = context.WithDeadline(ctx, s.expires)
		end := cancel
		cancel = func() { stop(); end() }
	}
	if s.id == "" {
		return ctx, cancel
	}
	log := zerolog.Ctx(r.Context())
	go func() {
		t := time.NewTicker(h.feedCheck)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			revoked, err := h.revoked.Revoked(ctx, s.id)
			if err != nil && ctx.Err() == nil {
				log.Error().Err(err).Msg("ui: cannot read session revocations: the live feed ends")
			}
			if revoked || err != nil {
				cancel()
				return
			}
		}
	}()
	return ctx, cancel
}

// eventMetadata formats an updated event's metadata as the live feed does
// (app.js, formatMetadata): "k=v, k=v" in key order, "{}" for none.
func eventMetadata(e lock.Event) string {
	if e.Type != lock.EventUpdated {
		return ""
	}
	if len(e.Metadata) == 0 {
		return "{}"
	}
	parts := make([]string, 0, len(e.Metadata))
	for _, k := range slices.Sorted(maps.Keys(e.Metadata)) {
		parts = append(parts, k+"="+e.Metadata[k])
	}
	return strings.Join(parts, ", ")
}
