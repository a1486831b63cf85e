package ui

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

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
}

// How the pages find recent events: the log reads only forward, so they
// read from a while before its newest event (by the time in its id, see
// lock.ParseEventID), first the last minute, then the last hour when that
// held too few, reading at most scanLimit events each time.
const (
	recentEvents = 20
	scanLimit    = 2000
	scanPage     = 500
)

var lookbacks = []time.Duration{time.Minute, time.Hour}

// errNoEventLog is the note of a store that records no events.
var errNoEventLog = errors.New("this store does not record events yet")

// feed returns the recent events of the names f selects that the session
// may read, and where the live feed continues.
func (h *Handler) feed(ctx context.Context, s session, f lock.EventFilter) feed {
	out := feed{FeedLock: f.Lock, FeedPrefix: f.Prefix}
	keep := func(e lock.Event) bool { return f.Match(e) && s.may(auth.ScopeRead, e.Lock) }
	events, last, partial, err := h.recent(ctx, keep)
	out.FeedAfter = last
	switch {
	case err != nil:
		out.EventsNote = "Events unavailable: " + errDetail(err)
	case partial:
		out.EventsNote = "The event log is busy: newer events than these may be missing here; the live feed has them."
	}
	for _, e := range events {
		out.Events = append(out.Events, eventView{
			ID: e.ID, Type: e.Type, Lock: e.Lock, Owner: e.Owner, Principal: e.Principal, Mode: e.Mode,
			Token: e.Token, HoldCount: e.HoldCount, Time: e.Time.UTC().Format(timeFormat),
		})
	}
	return out
}

// recent returns up to recentEvents events that keep passes, newest first,
// and the log's newest id; partial is true when the scan stopped at
// scanLimit before it reached that id.
func (h *Handler) recent(ctx context.Context, keep func(lock.Event) bool) (events []lock.Event, last string, partial bool, err error) {
	log := h.store.Events()
	if log == nil {
		return nil, "", false, errNoEventLog
	}
	if last, err = log.LastEventID(ctx); err != nil || last == "" {
		return nil, last, false, err
	}
	newest, _, parsed := lock.ParseEventID(last)
	for _, back := range lookbacks {
		from := "" // the oldest event kept
		if ms := uint64(back.Milliseconds()); parsed && newest > ms {
			from = fmt.Sprintf("%d-0", newest-ms)
		}
		events, partial, err = scan(ctx, log, from, last, keep)
		if err != nil || partial || len(events) >= recentEvents || from == "" {
			break
		}
	}
	slices.Reverse(events)
	return events, last, partial, err
}

// scan reads the log after from up to last and keeps the newest
// recentEvents events that keep passes, oldest first.
func scan(ctx context.Context, log lock.EventLog, from, last string, keep func(lock.Event) bool) (events []lock.Event, partial bool, err error) {
	for read := 0; ; {
		if read >= scanLimit {
			return events, true, nil
		}
		batch, err := log.ReadEvents(ctx, from, scanPage)
		if lock.ErrorCode(err) == lock.CodeEventsGone && from != "" {
			from = "" // the log starts after from: read all it keeps
			continue
		}
		if err != nil {
			return nil, false, err
		}
		for _, e := range batch {
			if lock.CompareEventIDs(e.ID, last) > 0 {
				return events, false, nil // the live feed shows it
			}
			if keep(e) {
				events = append(events, e)
				if len(events) > recentEvents {
					events = events[1:]
				}
			}
		}
		if len(batch) < scanPage {
			return events, false, nil
		}
		from = batch[len(batch)-1].ID
		read += len(batch)
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
// send an Authorization header, so the dashboard asks the API with the
// session's key and passes its answer on as it is: the same stream, the
// same filtering by the key's patterns, the same errors (404 or 501 while
// the server has no events, which the script shows as unavailable).
func (h *Handler) handleEvents(w http.ResponseWriter, r *http.Request, s session) {
	// A request of its own, not a clone: the API routes it afresh.
	ctx, cancel := context.WithCancel(context.Background())
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
	if s.apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+s.apiKey)
	}
	h.api.ServeHTTP(w, req)
}
