package http

import (
	"context"
	"encoding/json"
	"math"
	"net/http"

	"github.com/lockapi/lockapi/event"
	"github.com/lockapi/lockapi/internal/auth"
	"github.com/lockapi/lockapi/internal/lock"
	"github.com/lockapi/lockapi/internal/webhook"
)

// Limits of GET /v1/webhooks/{id}/dead-letters.
const (
	defaultDeadLetterLimit = 100
	maxDeadLetterLimit     = 1000
)

// Webhooks is what the /v1/webhooks routes need of the webhook service.
type Webhooks interface {
	Create(ctx context.Context, spec webhook.Spec) (webhook.Subscription, error)
	List(ctx context.Context) ([]webhook.Subscription, error)
	Get(ctx context.Context, id string) (webhook.Subscription, error)
	Delete(ctx context.Context, id string) error
	Ping(ctx context.Context, id string) (webhook.Attempt, webhook.Ping, error)
	DeadLetters(ctx context.Context, id, after string, limit int) ([]webhook.DeadLetter, error)
	Replay(ctx context.Context, id, eventID string) error
}

var _ Webhooks = (*webhook.Service)(nil)

// Webhook is the JSON form of a subscription: never its secrets.
type Webhook struct {
	ID     string           `json:"id"`
	URL    string           `json:"url"`
	Prefix string           `json:"prefix"`
	Types  []lock.EventType `json:"types"` // empty: every type
	Source webhook.Source   `json:"source"`
	// CreatedAt is absent for the file's subscriptions.
	CreatedAt string `json:"created_at,omitempty"`
	// WorkerLease says who holds the lease that lets a worker deliver the
	// subscription (webhook.LeaseName): a worker, nobody (one takes it at
	// its next try), or something other than a worker, which stops every
	// delivery until it ends (or an admin force-releases it).
	WorkerLease WorkerLease `json:"worker_lease"`
}

// WorkerLease is the worker_lease of a Webhook.
type WorkerLease string

const (
	WorkerLeaseWorker WorkerLease = "worker"
	WorkerLeaseFree   WorkerLease = "free"
	WorkerLeaseOther  WorkerLease = "other"
	// WorkerLeaseUnknown: the store did not answer.
	WorkerLeaseUnknown WorkerLease = "unknown"
)

// workerLease reads who holds the worker lease of subscription id.
func (s *Server) workerLease(ctx context.Context, id string) WorkerLease {
	st, err := s.store.Inspect(ctx, webhook.LeaseName(id))
	switch {
	case err != nil:
		return WorkerLeaseUnknown
	case !st.Held:
		return WorkerLeaseFree
	}
	for _, h := range st.Holders {
		if h.Principal != webhook.LeasePrincipal {
			return WorkerLeaseOther
		}
	}
	return WorkerLeaseWorker
}

// webhookView is the JSON form of sub, with its worker lease.
func (s *Server) webhookView(ctx context.Context, sub webhook.Subscription) Webhook {
	w := newWebhook(sub)
	w.WorkerLease = s.workerLease(ctx, sub.ID)
	return w
}

// blockedWebhooks counts the subscriptions whose worker lease something
// other than a worker holds: the lockapi_webhooks_blocked gauge.
func (s *Server) blockedWebhooks() float64 {
	ctx, cancel := context.WithTimeout(s.closing, readyTimeout)
	defer cancel()
	subs, err := s.cfg.Webhooks.List(ctx)
	if err != nil {
		return math.NaN()
	}
	n := 0
	for _, sub := range subs {
		if s.workerLease(ctx, sub.ID) == WorkerLeaseOther {
			n++
		}
	}
	return float64(n)
}

func newWebhook(s webhook.Subscription) Webhook {
	w := Webhook{ID: s.ID, URL: s.URL, Prefix: s.Prefix, Types: s.Types, Source: s.Source, WorkerLease: WorkerLeaseFree}
	if w.Types == nil {
		w.Types = []lock.EventType{}
	}
	if !s.CreatedAt.IsZero() {
		w.CreatedAt = event.FormatTime(s.CreatedAt)
	}
	return w
}

// NewWebhook is the answer to POST /v1/webhooks: the only one that shows
// the secret.
type NewWebhook struct {
	Webhook
	Secret string `json:"secret"`
}

// WebhookList is the answer to GET /v1/webhooks.
type WebhookList struct {
	Webhooks []Webhook `json:"webhooks"`
}

// CreateWebhookRequest is the body of POST /v1/webhooks.
type CreateWebhookRequest struct {
	URL    string   `json:"url"`
	Prefix string   `json:"prefix"`
	Types  []string `json:"types"`
}

// PingResult is the answer to POST /v1/webhooks/{id}/ping.
type PingResult struct {
	EventID   string `json:"event_id"`
	Delivered bool   `json:"delivered"`
	Outcome   string `json:"outcome"`
	// Status is the receiver's HTTP status; null when it gave none.
	Status     *int    `json:"status"`
	Error      *string `json:"error"`
	DurationMs int64   `json:"duration_ms"`
}

// DeadLetter is the JSON form of a webhook.DeadLetter.
type DeadLetter struct {
	EventID    string          `json:"event_id"`
	Event      json.RawMessage `json:"event"` // the delivery body
	Attempts   int             `json:"attempts"`
	LastStatus *int            `json:"last_status"`
	LastError  string          `json:"last_error"`
	FailedAt   string          `json:"failed_at"`
}

// DeadLetterList is one page of GET /v1/webhooks/{id}/dead-letters.
type DeadLetterList struct {
	DeadLetters []DeadLetter `json:"dead_letters"`
	// NextAfter is the after of the next page; null on the last.
	NextAfter *string `json:"next_after"`
}

// ReplayResult is the answer to POST .../dead-letters/{event_id}/replay.
type ReplayResult struct {
	Webhook string `json:"webhook"`
	EventID string `json:"event_id"`
	Queued  bool   `json:"queued"`
}

var errWebhooksOff = &httpError{kindWebhooksOff, "this server delivers no webhooks: its store records no lock events (LOCKAPI_EVENTS=false, or redlock mode)"}

// webhookCaller authorizes the caller for a webhook under prefix: an admin
// key whose patterns cover every lock under it.
func webhookCaller(c caller, prefix string) error {
	return c.key.AllowPrefix(auth.ScopeAdmin, prefix)
}

// webhookFor reads the {id} of a webhook route, checks the caller may
// manage that webhook, and returns it. It answers the request itself when
// it returns false.
func (s *Server) webhookFor(w http.ResponseWriter, r *http.Request) (webhook.Subscription, bool) {
	id := pathParam(r, "id")
	if fe := webhook.CheckID("id", id); fe != nil {
		Error(w, r, lock.Invalid(*fe))
		return webhook.Subscription{}, false
	}
	if err := authorize(callerOf(r), auth.ScopeAdmin, ""); err != nil {
		Error(w, r, err)
		return webhook.Subscription{}, false
	}
	if s.cfg.Webhooks == nil {
		Error(w, r, errWebhooksOff)
		return webhook.Subscription{}, false
	}
	sub, err := s.cfg.Webhooks.Get(r.Context(), id)
	if err == nil {
		err = webhookCaller(callerOf(r), sub.Prefix)
	}
	if err != nil {
		Error(w, r, err)
		return webhook.Subscription{}, false
	}
	return sub, true
}

// handleCreateWebhook handles the "POST /v1/webhooks" route: a new
// subscription, answered with its secret, which no other answer shows.
func (s *Server) handleCreateWebhook(w http.ResponseWriter, r *http.Request) {
	var req CreateWebhookRequest
	if err := decodeBody(w, r, &req); err != nil {
		Error(w, r, err)
		return
	}
	err := webhookCaller(callerOf(r), req.Prefix)
	if err == nil {
		// The reserved names are lockapi's own (webhook worker leases
		// among them): their events are no one's to subscribe to.
		err = reserved(req.Prefix)
	}
	if err != nil {
		Error(w, r, err)
		return
	}
	if s.cfg.Webhooks == nil {
		Error(w, r, errWebhooksOff)
		return
	}
	sub, err := s.cfg.Webhooks.Create(r.Context(), webhook.Spec{URL: req.URL, Prefix: req.Prefix, Types: req.Types,
		Principal: callerOf(r).principal, Quota: s.cfg.MaxWebhooksPerPrincipal})
	if err != nil {
		Error(w, r, err)
		return
	}
	w.Header().Set("Location", "/v1/webhooks/"+sub.ID)
	writeJSON(w, r, http.StatusCreated, NewWebhook{Webhook: s.webhookView(r.Context(), sub), Secret: sub.Secrets[0]})
}

// handleListWebhooks handles the "GET /v1/webhooks" route: every
// subscription the caller may manage, the file's first.
func (s *Server) handleListWebhooks(w http.ResponseWriter, r *http.Request) {
	if err := parseQuery(r).err(); err != nil {
		Error(w, r, err)
		return
	}
	c := callerOf(r)
	if err := authorize(c, auth.ScopeAdmin, ""); err != nil {
		Error(w, r, err)
		return
	}
	if s.cfg.Webhooks == nil {
		Error(w, r, errWebhooksOff)
		return
	}
	subs, err := s.cfg.Webhooks.List(r.Context())
	if err != nil {
		Error(w, r, err)
		return
	}
	out := WebhookList{Webhooks: make([]Webhook, 0, len(subs))}
	for _, sub := range subs {
		if webhookCaller(c, sub.Prefix) == nil {
			out.Webhooks = append(out.Webhooks, s.webhookView(r.Context(), sub))
		}
	}
	writeJSON(w, r, http.StatusOK, out)
}

// handleGetWebhook handles the "GET /v1/webhooks/{id}" route.
func (s *Server) handleGetWebhook(w http.ResponseWriter, r *http.Request) {
	sub, ok := s.webhookFor(w, r)
	if !ok {
		return
	}
	writeJSON(w, r, http.StatusOK, s.webhookView(r.Context(), sub))
}

// handleDeleteWebhook handles the "DELETE /v1/webhooks/{id}" route: the
// subscription, its cursor and its dead letters go. Its worker stops
// within seconds on every instance.
func (s *Server) handleDeleteWebhook(w http.ResponseWriter, r *http.Request) {
	sub, ok := s.webhookFor(w, r)
	if !ok {
		return
	}
	if err := s.cfg.Webhooks.Delete(r.Context(), sub.ID); err != nil {
		Error(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// handlePingWebhook handles the "POST /v1/webhooks/{id}/ping" route: it
// delivers a ping event now, once, and says how the receiver answered.
func (s *Server) handlePingWebhook(w http.ResponseWriter, r *http.Request) {
	sub, ok := s.webhookFor(w, r)
	if !ok {
		return
	}
	a, p, err := s.cfg.Webhooks.Ping(r.Context(), sub.ID)
	if err != nil {
		Error(w, r, err)
		return
	}
	out := PingResult{EventID: p.ID, Delivered: a.OK(), Outcome: string(a.Outcome), DurationMs: a.Duration.Milliseconds()}
	if a.Status != 0 {
		out.Status = &a.Status
	}
	if a.Err != nil {
		msg := a.Err.Error()
		out.Error = &msg
	}
	writeJSON(w, r, http.StatusOK, out)
}

// handleDeadLetters handles the "GET /v1/webhooks/{id}/dead-letters" route:
// a page of the events given up, oldest first.
func (s *Server) handleDeadLetters(w http.ResponseWriter, r *http.Request) {
	q := parseQuery(r)
	after, byAfter := q.str("after")
	limit := q.int("limit", defaultDeadLetterLimit, 1, maxDeadLetterLimit, false)
	if byAfter {
		checkEventID(q, "after", after)
	}
	if err := q.err(); err != nil {
		Error(w, r, err)
		return
	}
	sub, ok := s.webhookFor(w, r)
	if !ok {
		return
	}
	letters, err := s.cfg.Webhooks.DeadLetters(r.Context(), sub.ID, after, int(limit)+1)
	if err != nil {
		Error(w, r, err)
		return
	}
	out := DeadLetterList{DeadLetters: make([]DeadLetter, 0, len(letters))}
	if len(letters) > int(limit) {
		letters = letters[:limit]
		next := letters[len(letters)-1].EventID
		out.NextAfter = &next
	}
	for _, d := range letters {
		dl := DeadLetter{EventID: d.EventID, Event: d.Payload, Attempts: d.Attempts, LastError: d.LastError, FailedAt: event.FormatTime(d.FailedAt)}
		if d.LastStatus != 0 {
			dl.LastStatus = &d.LastStatus
		}
		out.DeadLetters = append(out.DeadLetters, dl)
	}
	writeJSON(w, r, http.StatusOK, out)
}

// handleReplayDeadLetter handles the
// "POST /v1/webhooks/{id}/dead-letters/{event_id}/replay" route: the dead
// letter is queued for delivery again, ahead of the next event, with a
// fresh retry period.
func (s *Server) handleReplayDeadLetter(w http.ResponseWriter, r *http.Request) {
	eventID := pathParam(r, "event_id")
	if _, _, ok := lock.ParseEventID(eventID); !ok {
		Error(w, r, lock.Invalid(lock.FieldError{Field: "event_id", Detail: "not an event id (<ms>-<seq>)"}))
		return
	}
	sub, ok := s.webhookFor(w, r)
	if !ok {
		return
	}
	if err := s.cfg.Webhooks.Replay(r.Context(), sub.ID, eventID); err != nil {
		Error(w, r, err)
		return
	}
	writeJSON(w, r, http.StatusAccepted, ReplayResult{Webhook: sub.ID, EventID: eventID, Queued: true})
}
