package webhook

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/lockapi/lockapi/internal/lock"
)

// State keeps what every lockapi instance must agree on about webhooks:
// the subscriptions created over the API, each subscription's cursor (the
// id of the last event it is done with) and its dead letters. The memory
// store's instance keeps it in memory (package memstate); instances on
// Redis share it there (package redisstate).
//
// Every method is safe for concurrent use. Methods that name a
// subscription's cursor, dead letters or replays work for any id,
// subscriptions from the webhooks file included.
type State interface {
	// Create adds sub, with cursor as its starting point (the last event
	// before it existed). When a subscription with the same DedupeKey
	// exists it adds nothing and fails with CodeExists. When quota is above
	// 0 and sub.Principal has quota subscriptions already it adds nothing
	// and fails with lock.CodeQuotaExceeded: the State counts, so that the
	// bound holds over every instance that shares it.
	Create(ctx context.Context, sub Subscription, cursor string, quota int) error
	// List returns every subscription, in no particular order.
	List(ctx context.Context) ([]Subscription, error)
	// Get returns one subscription, or fails with CodeNotFound.
	Get(ctx context.Context, id string) (Subscription, error)
	// Delete removes a subscription with its cursor, dead letters and
	// replays, or fails with CodeNotFound.
	Delete(ctx context.Context, id string) error

	// Cursor returns a subscription's cursor; ok is false when none was
	// ever set.
	Cursor(ctx context.Context, id string) (cursor string, ok bool, err error)
	// SetCursor records the last event the subscription is done with.
	SetCursor(ctx context.Context, id, cursor string) error

	// AddDeadLetter keeps an event the worker gave up on, replacing one
	// with the same event id; past MaxDeadLetters the oldest go.
	AddDeadLetter(ctx context.Context, id string, d DeadLetter) error
	// DeadLetters returns up to limit dead letters after the event id
	// after ("" from the first), in event order.
	DeadLetters(ctx context.Context, id, after string, limit int) ([]DeadLetter, error)
	// Replay moves a dead letter to the subscription's replays, which its
	// worker delivers before the next event; CodeNotFound when there is
	// no such dead letter.
	Replay(ctx context.Context, id, eventID string) error
	// Replays returns up to limit of the subscription's replays, in event
	// order.
	Replays(ctx context.Context, id string, limit int) ([]DeadLetter, error)
	// DoneReplay removes a replay that was delivered (or dead-lettered
	// again).
	DoneReplay(ctx context.Context, id, eventID string) error
}

// Notifier is implemented by a State that tells of changes to the
// subscriptions, so that a Service reads them only when they changed
// instead of polling. A State shared by several instances (redisstate)
// tells of the changes made through any of them.
type Notifier interface {
	// Changes returns a channel that receives a value soon after a
	// subscription is created or deleted or a dead letter is queued for
	// replay, and once the notices are subscribed to, the first time and
	// after every reconnection (a change made while not subscribed is not
	// told). Values coalesce: one may stand for several changes, and it
	// names none. The channel is closed once ctx ends.
	//
	// A notice may be lost (a connection that fails as it is sent), so
	// the Service still reads the subscriptions every Config.Refresh.
	Changes(ctx context.Context) <-chan struct{}
}

// MaxDeadLetters bounds a subscription's dead letters: past it the oldest
// are dropped, so that a receiver that is gone for good costs bounded
// memory.
const MaxDeadLetters = 10000

// DeadLetter is an event whose delivery was given up: after the retry
// period, or because it could not be delivered at all.
type DeadLetter struct {
	EventID string `json:"event_id"`
	// Payload is the delivery body, sent again as it is by a replay.
	Payload json.RawMessage `json:"payload"`
	// Attempts counts the failed attempts.
	Attempts int `json:"attempts"`
	// LastStatus is the receiver's last HTTP status; 0 when it gave none
	// (a refused connection, a timeout).
	LastStatus int       `json:"last_status"`
	LastError  string    `json:"last_error"`
	FailedAt   time.Time `json:"failed_at"`
}

// Errors of States.

// NotFound is the error for an unknown subscription id.
func NotFound(id string) *lock.Error {
	return &lock.Error{Code: CodeNotFound, Detail: fmt.Sprintf("there is no webhook %q", id)}
}

// DeadLetterNotFound is the error for an unknown dead letter.
func DeadLetterNotFound(id, eventID string) *lock.Error {
	return &lock.Error{Code: CodeNotFound, Detail: fmt.Sprintf("webhook %q has no dead letter for event %q", id, eventID)}
}

// Exists is the error for a subscription that would repeat subscription
// id.
func Exists(id string) *lock.Error {
	return &lock.Error{Code: CodeExists, Detail: fmt.Sprintf("webhook %q already delivers the same events to the same URL", id),
		Fields: []lock.FieldError{{Field: "url", Detail: fmt.Sprintf("webhook %q has the same url, prefix and types", id)}}}
}
