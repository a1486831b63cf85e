package client

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"mime"
	"net/http"
	"strings"
	"time"

	"github.com/lockapi/lockapi/client/api"
	"github.com/lockapi/lockapi/event"
)

// EventType names a change of a lock.
type EventType = event.Type

// The event types (docs/EVENTS.md).
const (
	EventGranted       = event.Granted       // a fresh lease: a new fencing token
	EventReentered     = event.Reentered     // the holder took one more hold
	EventRenewed       = event.Renewed       // a lease's TTL was reset
	EventReleased      = event.Released      // a lease ended by its release, or dropped one hold of several
	EventExpired       = event.Expired       // a lease's TTL ran out, or its session ended
	EventForceReleased = event.ForceReleased // an admin ended every lease of the lock
	EventUpdated       = event.Updated       // the holder replaced its lease's metadata (Event.Metadata)
)

// Event is one change of one lease of a lock: the wire form itself
// (package event), as the server sent it. Its QueueLength is nil where the
// server did not know it, its LeaseID "" unless the API key is an admin's,
// and its Session "" for a lease bound to none. event.Marshal writes it
// again byte for byte as the server did.
type Event = event.Event

// EventsOptions selects the events of Client.Events. The zero value
// selects every event of every lock the API key may read, from the next.
type EventsOptions struct {
	// Lock selects the events of one lock, Prefix those of the locks whose
	// names start with it: at most one of the two.
	Lock   string
	Prefix string
	// Types selects events of these types; none selects all.
	Types []EventType
	// After resumes after the event with this id, as the last run left off;
	// "" starts with the next event.
	After string
	// OnReconnect, when set, is called before each reconnect: err says why
	// the stream ended, after is the id it resumes after ("" when no event
	// came yet and After was "": it starts with the next event), and pause
	// is how long it waits first. Events shows nothing while it
	// reconnects; this lets a caller say so.
	OnReconnect func(err error, after string, pause time.Duration)
}

// Reconnection pacing of Events, and how long a stream may stay silent:
// the server sends a keep-alive every 15s, so three missed ones mean the
// connection is dead even if no error said so.
var (
	eventsRetryBase   = 100 * time.Millisecond
	eventsRetryMax    = 5 * time.Second
	eventsIdleTimeout = 45 * time.Second
)

// errStreamIdle ends a connection that stayed silent too long.
var errStreamIdle = errors.New("the event stream stayed silent too long")

// Events streams the changes of the locks opts selects (GET /v1/events),
// in the order the server recorded them, until ctx ends or the loop stops:
//
//	for ev, err := range c.Events(ctx, client.EventsOptions{Prefix: "deploy:"}) {
//		if err != nil {
//			return err
//		}
//		fmt.Println(ev.Time, ev.Type, ev.Lock, ev.Owner, ev.FencingToken)
//	}
//
// When the connection drops, or the server ends the stream (it shuts down),
// Events reconnects after a pause (100ms doubling to 5s, or the server's
// Retry-After) and resumes after the last event it yielded: the loop sees
// every event the server's log keeps, in order, and none twice.
//
// An error ends the sequence: the first request's failure (the server is
// unreachable, or it refused: a *ProblemError); on a reconnect, any answer
// but a failure worth retrying, such as 410 events-gone when the resume
// point is older than the server's log keeps; or ctx's error.
func (c *Client) Events(ctx context.Context, opts EventsOptions) iter.Seq2[Event, error] {
	return func(yield func(Event, error) bool) {
		after := opts.After
		stopped := false
		connected := false
		bo := newBackoff(eventsRetryBase, eventsRetryMax)
		for {
			got := 0
			opened, err := c.streamEvents(ctx, opts, after, func(e Event) bool {
				after = e.ID
				got++
				stopped = !yield(e, nil)
				return !stopped
			})
			connected = connected || opened
			switch {
			case stopped:
				return
			case ctx.Err() != nil:
				yield(Event{}, fmt.Errorf("lockapi: events: %w", context.Cause(ctx)))
				return
			case !connected || !errors.Is(err, ErrUnavailable):
				yield(Event{}, err)
				return
			}
			if got > 0 {
				bo = newBackoff(eventsRetryBase, eventsRetryMax)
			}
			pause := bo.next()
			if pe, ok := errors.AsType[*ProblemError](err); ok {
				pause = max(pause, pe.RetryAfter)
			}
			if opts.OnReconnect != nil {
				opts.OnReconnect(err, after, pause)
			}
			if !sleepUntil(ctx, time.Now().Add(pause)) {
				yield(Event{}, fmt.Errorf("lockapi: events: %w", context.Cause(ctx)))
				return
			}
		}
	}
}

// streamEvents makes one request of Events and hands each event to yield,
// until yield returns false, ctx ends or the stream does. opened reports
// whether the server answered with a stream.
func (c *Client) streamEvents(ctx context.Context, opts EventsOptions, after string, yield func(Event) bool) (opened bool, err error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	params := &api.GetEventsParams{}
	if opts.Lock != "" {
		params.Lock = &opts.Lock
	}
	if opts.Prefix != "" {
		params.Prefix = &opts.Prefix
	}
	if len(opts.Types) > 0 {
		types := make([]api.EventType, len(opts.Types))
		for i, t := range opts.Types {
			types[i] = api.EventType(t)
		}
		params.Types = &types
	}
	if after != "" {
		params.LastEventID = &after
	}
	// A silent connection is cut: first after the request timeout without
	// an answer, then after eventsIdleTimeout without a line.
	idle := time.AfterFunc(c.timeout, func() { cancel(errStreamIdle) })
	defer idle.Stop()
	resp, err := c.api.GetEvents(ctx, params)
	if err != nil {
		return false, c.streamError(ctx, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		return false, responseError(opts.Lock, resp, body)
	}
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != "text/event-stream" {
		return false, fmt.Errorf("lockapi: events: the server answered %q, not text/event-stream", resp.Header.Get("Content-Type"))
	}

	idle.Reset(eventsIdleTimeout)
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	var id, data string
	for sc.Scan() {
		idle.Reset(eventsIdleTimeout)
		line := sc.Text()
		if line == "" { // the end of an event
			if data != "" {
				e, err := decodeEvent(id, data)
				if err != nil {
					return true, err
				}
				if !yield(e) {
					return true, nil
				}
			}
			id, data = "", ""
			continue
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "id":
			id = value
		case "data":
			if data != "" {
				data += "\n"
			}
			data += value
		}
	}
	err = sc.Err()
	if err == nil {
		err = io.ErrUnexpectedEOF // the server ended the stream
	}
	return true, c.streamError(ctx, fmt.Errorf("the event stream broke: %w", err))
}

// streamError explains a failed exchange of a stream: the stream's own
// silence, or the connection's failure, both worth retrying.
func (c *Client) streamError(ctx context.Context, err error) error {
	if cause := context.Cause(ctx); errors.Is(cause, errStreamIdle) {
		err = cause
	}
	return unavailable(fmt.Errorf("events: %w", err))
}

// decodeEvent reads the data of an event, whose frame had id.
func decodeEvent(id, data string) (Event, error) {
	var e Event
	if err := json.Unmarshal([]byte(data), &e); err != nil {
		return Event{}, fmt.Errorf("lockapi: events: event %q: %w", id, err)
	}
	if e.ID == "" {
		e.ID = id
	}
	return e, nil
}
