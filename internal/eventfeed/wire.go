package eventfeed

import (
	"github.com/lockapi/lockapi/event"
	"github.com/lockapi/lockapi/internal/lock"
)

// Wire returns e as the API writes it (package event), without its lease
// id: a lease id is a capability to renew and release, which only admins
// may see, so the caller adds it where it may. It is the one mapping of the
// domain's event to the wire's: a new field of both is one line here.
func Wire(e lock.Event) event.Event {
	mode := e.Mode
	if mode == "" {
		mode = lock.Exclusive
	}
	out := event.Event{
		ID:           e.ID,
		Type:         e.Type,
		Lock:         e.Lock,
		Owner:        e.Owner,
		Principal:    e.Principal,
		Mode:         event.Mode(mode),
		FencingToken: e.Token,
		HoldCount:    e.HoldCount,
		Time:         e.Time,
		Session:      e.Session,
		Metadata:     e.Metadata,
	}
	if e.Type == event.Granted {
		ms := e.Waited.Milliseconds()
		out.WaitedMS = &ms
	}
	if e.Queue >= 0 {
		q := e.Queue
		out.QueueLength = &q
	}
	return out
}
