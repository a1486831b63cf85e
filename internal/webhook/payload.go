package webhook

import (
	"encoding/json"
	"time"

	"github.com/lockapi/lockapi/event"
	"github.com/lockapi/lockapi/internal/eventfeed"
	"github.com/lockapi/lockapi/internal/lock"
)

// Ping is the body of a ping: POST /v1/webhooks/{id}/ping, to check that a
// receiver is reachable and verifies signatures.
type Ping struct {
	ID      string `json:"id"`   // "ping_" and a fresh id: no event's
	Type    string `json:"type"` // always "ping"
	Webhook string `json:"webhook"`
	Time    string `json:"time"`
}

func newPing(webhookID string, now time.Time) Ping {
	return Ping{ID: "ping_" + NewID(), Type: PingType, Webhook: webhookID, Time: event.FormatTime(now)}
}

// payload is the body of e's delivery: its wire form (package event, as
// GET /v1/events writes it), never with its lease id. An event holds
// strings, numbers and a time, which always encode.
func payload(e lock.Event) []byte {
	b, _ := event.Marshal(eventfeed.Wire(e))
	return b
}

// encode marshals a payload. Payloads hold strings and numbers only, which
// always encode.
func encode(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}
