package http

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/lockapi/lockapi/event"
	"github.com/lockapi/lockapi/internal/auth"
	"github.com/lockapi/lockapi/internal/eventfeed"
	"github.com/lockapi/lockapi/internal/lock"
)

// DefaultEventsWriteTimeout bounds each write to an event stream
// (Config.EventsWriteTimeout): a client that stops reading is cut off
// then, rather than holding its handler forever.
const DefaultEventsWriteTimeout = 30 * time.Second

// newEvent returns the data of e's Server-Sent Event; admins also see the
// lease id.
func newEvent(e lock.Event, admin bool) event.Event {
	out := eventfeed.Wire(e)
	if admin {
		out.LeaseID = e.LeaseID
	}
	return out
}

// newEventFeed returns a feed of log, nil when there is no log (the store
// records no events).
func newEventFeed(log lock.EventLog, logger zerolog.Logger) *eventfeed.Feed {
	if log == nil {
		return nil
	}
	return eventfeed.New(log, eventfeed.Options{Logger: logger.With().Str("component", "events").Logger()})
}

var errEventsOff = &httpError{kindEventsOff, "this server records no lock events (LOCKAPI_EVENTS=false, or redlock mode)"}

// errHeartbeat ends a wait for the next event when a stream is due a
// keep-alive.
var errHeartbeat = errors.New("heartbeat due")

// handleEvents handles the "GET /v1/events" route: the lock events the
// caller may read, as Server-Sent Events (docs/EVENTS.md), from the next
// one or from a resume point, until the client goes away or the server
// closes.
func (s *Server) handleEvents(w http.ResponseWriter, r *http.Request) {
	filter, after, err := parseEventsRequest(r)
	if err != nil {
		Error(w, r, err)
		return
	}
	c := callerOf(r)
	err = authorize(c, auth.ScopeRead, filter.Lock)
	if err == nil {
		err = reserved(filter.Prefix)
	}
	if err != nil {
		Error(w, r, err)
		return
	}
	if s.events == nil {
		Error(w, r, errEventsOff)
		return
	}
	ctx, end, err := s.beginWait(r, c)
	if err != nil {
		Error(w, r, err)
		return
	}
	defer end()
	ctx, stop := s.whileKeyValid(ctx, c, zerolog.Ctx(r.Context()))
	defer stop()
	var sub *eventfeed.Subscription
	if after == fromStart {
		sub, err = s.events.SubscribeFromOldest(ctx, filter)
	} else {
		sub, err = s.events.Subscribe(ctx, after, filter)
	}
	if err != nil {
		Error(w, r, waitError(ctx, err))
		return
	}
	defer sub.Close()

	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Accel-Buffering", "no") // nginx: pass each event on at once
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodHead {
		return // the answer a GET would start with, and no stream
	}
	st := &eventStream{w: w, rc: http.NewResponseController(w), writeTimeout: s.cfg.EventsWriteTimeout}
	// No deadline outlives the stream: the connection may serve a long
	// poll next.
	defer st.rc.SetWriteDeadline(time.Time{})
	if st.write() != nil { // the headers, at once
		return
	}

	s.stream(ctx, st, sub, c, zerolog.Ctx(r.Context()))
}

// stream writes the events of sub that c may read to st, with a keep-alive
// comment when nothing was written for a heartbeat, until ctx ends or a
// write fails.
func (s *Server) stream(ctx context.Context, st *eventStream, sub *eventfeed.Subscription, c caller, logger *zerolog.Logger) {
	admin := authorize(c, auth.ScopeAdmin, "") == nil
	for {
		// A keep-alive is due when nothing was written for a heartbeat,
		// also while events the key may not read go by.
		nctx, cancel := context.WithDeadlineCause(ctx, st.wrote.Add(s.cfg.EventsHeartbeat), errHeartbeat)
		e, err := sub.Next(nctx)
		beat := nctx.Err() != nil && ctx.Err() == nil
		cancel()
		switch {
		case beat:
			err = st.comment("keep-alive")
		case err != nil:
			// Too late for a problem: the stream ends, and the client
			// resumes from its Last-Event-ID, which answers the problem
			// (410 when it fell behind what the log keeps).
			if ctx.Err() == nil {
				logger.Info().Err(err).Str("code", string(lock.ErrorCode(err))).Msg("event stream ended")
			}
			return
		case e.UnknownLayout != "":
			err = st.comment(unknownLayoutNotice(e))
		case authorize(c, auth.ScopeRead, e.Lock) != nil:
			continue // outside the key's patterns, silently
		default:
			err = st.event(e.ID, string(e.Type), newEvent(e, admin))
		}
		if err != nil {
			logger.Debug().Err(err).Msg("write event stream")
			return
		}
	}
}

// unknownLayoutNotice is the comment that stands on a stream for an event
// this version cannot read (docs/EVENTS.md): its id, not sent as the
// stream's id, so that a client that resumes (on a newer instance) reads
// the event itself.
func unknownLayoutNotice(e lock.Event) string {
	return "unknown-layout " + e.ID + " v=" + e.UnknownLayout + ": an event this lockapi cannot read (written by a newer version); resume after the previous id on a newer instance to read it"
}

// parseEventsRequest reads a GET /v1/events: its filter and its resume
// point, the Last-Event-ID header or else the after parameter.
func parseEventsRequest(r *http.Request) (filter lock.EventFilter, after string, err error) {
	q := parseQuery(r)
	name, byLock := q.str("lock")
	prefix, byPrefix := q.str("prefix")
	if byLock {
		if fe := lock.CheckName("lock", name); fe != nil {
			q.fields = append(q.fields, *fe)
		}
	}
	if fe := lock.CheckPrefix("prefix", prefix); fe != nil {
		q.fields = append(q.fields, *fe)
	}
	if byLock && byPrefix {
		q.fail("prefix", "give lock or prefix, not both")
	}
	filter.Lock, filter.Prefix = name, prefix
	if types, ok := q.str("types"); ok {
		for t := range strings.SplitSeq(types, ",") {
			typ, ok := event.ParseType(t)
			if !ok {
				q.fail("types", fmt.Sprintf("%q is not an event type; the types are %s", t, event.TypeList()))
				break
			}
			filter.Types = append(filter.Types, typ)
		}
	}
	// Both resume points are checked, though Last-Event-ID wins: a
	// malformed one is a mistake whichever is used.
	after, byAfter := q.str("after")
	if byAfter {
		checkResumePoint(q, "after", after)
	}
	switch ids := r.Header.Values("Last-Event-ID"); {
	case len(ids) > 1:
		q.fail("Last-Event-ID", "give one Last-Event-ID header, not several")
	case len(ids) == 1 && ids[0] != "":
		after = ids[0]
		checkResumePoint(q, "Last-Event-ID", after)
	}
	return filter, after, q.err()
}

// fromStart is the resume point that starts a stream with the oldest event
// the log keeps, whatever it keeps: no event is older, so it is never
// answered 410 events-gone.
const fromStart = "0"

// checkResumePoint records a problem with the resume point given as field:
// an event id, or fromStart.
func checkResumePoint(q *query, field, id string) {
	if _, _, ok := lock.ParseEventID(id); !ok && id != fromStart {
		q.fail(field, fmt.Sprintf("must be an event id, as an event's id gives it: <ms>-<seq>, each 1-19 digits (%d characters at most); or 0, the start of the log", lock.MaxEventIDLen))
	}
}

// checkEventID records a problem with the event id given as field.
func checkEventID(q *query, field, id string) {
	if _, _, ok := lock.ParseEventID(id); !ok {
		q.fail(field, fmt.Sprintf("must be an event id, as an event's id gives it: <ms>-<seq>, each 1-19 digits (%d characters at most)", lock.MaxEventIDLen))
	}
}

// eventStream writes Server-Sent Events, flushing each at once.
type eventStream struct {
	w     http.ResponseWriter
	rc    *http.ResponseController
	buf   []byte
	wrote time.Time // the last write
	// writeTimeout bounds each write (Config.EventsWriteTimeout).
	writeTimeout time.Duration
}

// event writes one event: its id, its type as the event name, and v as the
// JSON data (one line: encoding/json escapes every newline).
func (st *eventStream) event(id, name string, v any) error {
	data, err := marshalJSON(v)
	if err != nil {
		return err
	}
	st.buf = append(st.buf[:0], "id: "...)
	st.buf = append(st.buf, id...)
	st.buf = append(st.buf, "\nevent: "...)
	st.buf = append(st.buf, name...)
	st.buf = append(st.buf, "\ndata: "...)
	st.buf = append(st.buf, data...)
	st.buf = append(st.buf, "\n\n"...)
	return st.write()
}

// comment writes a comment line, which clients ignore.
func (st *eventStream) comment(text string) error {
	st.buf = append(append(append(st.buf[:0], ": "...), text...), "\n\n"...)
	return st.write()
}

// write writes and flushes what buf holds.
func (st *eventStream) write() error {
	st.wrote = time.Now()
	_ = st.rc.SetWriteDeadline(st.wrote.Add(st.writeTimeout))
	if len(st.buf) > 0 {
		if _, err := st.w.Write(st.buf); err != nil {
			return err
		}
	}
	return st.rc.Flush()
}
