package webhook

import (
	"encoding/json"
	"time"

	"github.com/lockapi/lockapi/internal/lock"
)

// timeFormat is the API's: RFC 3339 in UTC with three fractional digits.
const timeFormat = "2006-01-02T15:04:05.000Z07:00"

// Payload is the body of an event's delivery: the event JSON of
// docs/EVENTS.md (the data of GET /v1/events), without lease_id. A lease id
// is a capability to renew and release, and a receiver is no admin.
type Payload struct {
	ID           string         `json:"id"`
	Type         lock.EventType `json:"type"`
	Lock         string         `json:"lock"`
	Owner        string         `json:"owner"`
	Principal    string         `json:"principal"`
	Mode         lock.Mode      `json:"mode"`
	FencingToken uint64         `json:"fencing_token"`
	HoldCount    int            `json:"hold_count"`
	QueueLength  *int           `json:"queue_length,omitempty"` // absent where the store did not know it
	Time         string         `json:"time"`
}

// NewPayload returns the payload of e.
func NewPayload(e lock.Event) Payload {
	mode := e.Mode
	if mode == "" {
		mode = lock.Exclusive
	}
	p := Payload{
		ID:           e.ID,
		Type:         e.Type,
		Lock:         e.Lock,
		Owner:        e.Owner,
		Principal:    e.Principal,
		Mode:         mode,
		FencingToken: e.Token,
		HoldCount:    e.HoldCount,
		Time:         e.Time.UTC().Format(timeFormat),
	}
	if e.Queue >= 0 {
		q := e.Queue
		p.QueueLength = &q
	}
	return p
}

// Ping is the body of a ping: POST /v1/webhooks/{id}/ping, to check that a
// receiver is reachable and verifies signatures.
type Ping struct {
	ID      string `json:"id"`   // "ping_" and a fresh id: no event's
	Type    string `json:"type"` // always "ping"
	Webhook string `json:"webhook"`
	Time    string `json:"time"`
}

func newPing(webhookID string, now time.Time) Ping {
	return Ping{ID: "ping_" + NewID(), Type: PingType, Webhook: webhookID, Time: now.UTC().Format(timeFormat)}
}

// encode marshals a payload. Payloads hold strings and numbers only, which
// always encode.
func encode(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}
