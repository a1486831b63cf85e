package ui

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/lockapi/lockapi/internal/auth"
	"github.com/lockapi/lockapi/internal/lock"
	"github.com/lockapi/lockapi/internal/webhook"
)

// Webhooks is what the webhooks pages need of the webhook service
// (*webhook.Service). Nil: the server delivers no webhooks.
//
// When it also has a webhook.State's Cursor method, the page shows where
// each subscription's delivery stands and how many events it is behind;
// when it has the Service's RetryBacklog and OldestUndelivered, it shows
// this instance's delivery backlog.
type Webhooks interface {
	List(ctx context.Context) ([]webhook.Subscription, error)
	Get(ctx context.Context, id string) (webhook.Subscription, error)
	DeadLetters(ctx context.Context, id, after string, limit int) ([]webhook.DeadLetter, error)
}

// cursorReader reads a subscription's cursor: the id of the last event it
// is done with.
type cursorReader interface {
	Cursor(ctx context.Context, id string) (cursor string, ok bool, err error)
}

// backlogReporter is the Service's view of this instance's workers.
type backlogReporter interface {
	RetryBacklog() int
	OldestUndelivered() time.Duration
}

// Bounds of what the webhooks page reads per subscription: it counts up to
// maxCountedDeadLetters dead letters and maxBehindScan events of the log
// past the cursor, and shows "N+" beyond.
const (
	maxCountedDeadLetters = 1000
	maxBehindScan         = 5000
	deadLetterPageSize    = 50
)

// webhookView is one subscription as the page shows it: never its secrets.
type webhookView struct {
	ID     string
	URL    string
	Prefix string
	Types  string
	Source webhook.Source
	// Cursor is the id of the last event delivered (or given up); ""
	// when unknown (CursorNote says why).
	Cursor     string
	CursorNote string
	// Behind counts the log's events past the cursor that the
	// subscription selects; BehindNote replaces it when it is not known.
	Behind     string
	BehindNote string
	// DeadLetters counts them ("1000+" past the bound).
	DeadLetters string
	// LastFailure describes the newest dead letter: when and why.
	LastFailure string
	// Worker is the instance holding the subscription's lease, "" when
	// none does.
	Worker string
	Error  string
}

// webhooksPage is the data of the webhooks page.
type webhooksPage struct {
	chrome
	Enabled  bool
	Webhooks []webhookView
	// Backlog is this instance's delivery backlog, "" when not reported.
	Backlog string
	// LastEventID is the newest event of the log.
	LastEventID string
}

// handleWebhooks handles the "GET /ui/webhooks" route: every subscription
// the session may manage, with its delivery health.
func (h *Handler) handleWebhooks(w http.ResponseWriter, r *http.Request, s session) {
	if err := s.allow(auth.ScopeAdmin, ""); err != nil {
		h.failErr(w, r, err)
		return
	}
	p := webhooksPage{chrome: h.chrome(s, "Webhooks"), Enabled: h.webhooks != nil}
	if !p.Enabled {
		h.render(w, r, http.StatusOK, "webhooks", p)
		return
	}
	ctx := r.Context()
	subs, err := h.webhooks.List(ctx)
	if err != nil {
		h.failErr(w, r, err)
		return
	}
	if b, ok := h.webhooks.(backlogReporter); ok {
		p.Backlog = fmt.Sprintf("%d subscription(s) waiting to retry an event; oldest undelivered event read: %s",
			b.RetryBacklog(), ageText(b.OldestUndelivered()))
	}
	log, logErr := h.eventLog()
	if logErr == nil {
		p.LastEventID, logErr = log.LastEventID(ctx)
	}
	for _, sub := range subs {
		if !mayManage(s, sub.Prefix) {
			continue
		}
		p.Webhooks = append(p.Webhooks, h.webhookView(ctx, sub, log, p.LastEventID, logErr))
	}
	h.render(w, r, http.StatusOK, "webhooks", p)
}

// webhookView reads what is known of sub's delivery. Failures to read one
// part show in that part's place: the page lists every subscription.
func (h *Handler) webhookView(ctx context.Context, sub webhook.Subscription, log lock.EventLog, last string, logErr error) webhookView {
	v := webhookView{ID: sub.ID, URL: sub.URL, Prefix: sub.Prefix, Types: "every type", Source: sub.Source}
	if len(sub.Types) > 0 {
		types := make([]string, len(sub.Types))
		for i, t := range sub.Types {
			types[i] = string(t)
		}
		v.Types = strings.Join(types, ", ")
	}

	// Where the delivery stands, and how far behind the log it is.
	cursorKnown := false
	if cr, ok := h.webhooks.(cursorReader); ok {
		switch c, set, err := cr.Cursor(ctx, sub.ID); {
		case err != nil:
			v.CursorNote = "unavailable: " + errDetail(err)
		case !set:
			v.CursorNote = "not started: delivery begins after the newest event"
		case c == "":
			v.CursorNote = "from the start of the log"
			cursorKnown = true
		default:
			v.Cursor, cursorKnown = c, true
		}
	} else {
		v.CursorNote = "not reported by this server"
	}
	switch {
	case !cursorKnown:
		v.BehindNote = "unknown"
	case logErr != nil:
		v.BehindNote = "unknown: " + errDetail(logErr)
	default:
		v.Behind, v.BehindNote = behind(ctx, log, sub, v.Cursor, last)
	}

	// Dead letters: how many, and the newest's failure.
	n, newest, err := h.countDeadLetters(ctx, sub.ID)
	switch {
	case err != nil:
		v.DeadLetters = "?"
		v.Error = "Dead letters unavailable: " + errDetail(err)
	case n > maxCountedDeadLetters:
		v.DeadLetters = fmt.Sprintf("%d+", maxCountedDeadLetters)
	default:
		v.DeadLetters = fmt.Sprint(n)
	}
	if newest != nil {
		v.LastFailure = failureText(*newest)
	}

	// Which instance delivers: the holder of the subscription's lease.
	if st, err := h.store.Inspect(ctx, webhook.LeaseName(sub.ID)); err == nil && st.Held && len(st.Holders) > 0 {
		v.Worker = st.Holders[0].Owner
	}
	return v
}

// behind counts the events after cursor up to last that sub selects,
// reading at most maxBehindScan events; note explains a count it could not
// make.
func behind(ctx context.Context, log lock.EventLog, sub webhook.Subscription, cursor, last string) (count, note string) {
	if last == "" || (cursor != "" && lock.CompareEventIDs(cursor, last) >= 0) {
		return "0", ""
	}
	n, read := 0, 0
	for after := cursor; read < maxBehindScan; {
		batch, err := log.ReadEvents(ctx, after, min(scanPage, maxBehindScan-read))
		if lock.ErrorCode(err) == lock.CodeEventsGone {
			return "", "the cursor is older than the event log keeps: events in between are lost to it"
		}
		if err != nil {
			return "", "unknown: " + errDetail(err)
		}
		for _, e := range batch {
			if lock.CompareEventIDs(e.ID, last) > 0 {
				return fmt.Sprint(n), ""
			}
			if e.UnknownLayout == "" && sub.Match(e) {
				n++
			}
		}
		if len(batch) == 0 {
			return fmt.Sprint(n), ""
		}
		read += len(batch)
		after = batch[len(batch)-1].ID
		if lock.CompareEventIDs(after, last) >= 0 {
			return fmt.Sprint(n), ""
		}
	}
	return fmt.Sprintf("%d+", n), fmt.Sprintf("counted in the first %d events past the cursor", maxBehindScan)
}

// countDeadLetters counts sub's dead letters up to maxCountedDeadLetters+1
// and returns the newest one read.
func (h *Handler) countDeadLetters(ctx context.Context, id string) (n int, newest *webhook.DeadLetter, err error) {
	after := ""
	for n <= maxCountedDeadLetters {
		page, err := h.webhooks.DeadLetters(ctx, id, after, maxCountedDeadLetters+1-n)
		if err != nil {
			return 0, nil, err
		}
		if len(page) == 0 {
			break
		}
		n += len(page)
		newest = &page[len(page)-1]
		after = newest.EventID
	}
	return n, newest, nil
}

func failureText(d webhook.DeadLetter) string {
	why := d.LastError
	if d.LastStatus != 0 {
		why = strings.TrimSpace(fmt.Sprintf("HTTP %d %s", d.LastStatus, d.LastError))
	}
	return fmt.Sprintf("%s: %s", d.FailedAt.UTC().Format(timeFormat), why)
}

func ageText(d time.Duration) string {
	if d <= 0 {
		return "none (caught up)"
	}
	return formatTTL(d.Milliseconds()) + " old"
}

// eventLog returns the store's event log, or why there is none.
func (h *Handler) eventLog() (lock.EventLog, error) {
	if log := h.store.Events(); log != nil {
		return log, nil
	}
	return nil, errNoEventLog
}

// mayManage reports whether the session may manage a subscription under
// prefix, as the API decides (auth.Key.AllowPrefix).
func mayManage(s session, prefix string) bool {
	return s.may(auth.ScopeAdmin, "") && s.key.AllowPrefix(auth.ScopeAdmin, prefix) == nil
}

// deadLettersPage is the data of a subscription's dead letters page.
type deadLettersPage struct {
	chrome
	Webhook     webhookView
	DeadLetters []deadLetterView
	// NextAfter is the after of the next page, "" on the last.
	NextAfter string
}

// deadLetterView is one dead letter: the delivery body holds the event,
// never a secret.
type deadLetterView struct {
	EventID    string
	FailedAt   string
	Attempts   int
	LastStatus int
	LastError  string
	Payload    string
}

// handleDeadLetters handles the "GET /ui/webhooks/{id}/dead-letters"
// route: one page of a subscription's dead letters, read-only (the API
// replays them).
func (h *Handler) handleDeadLetters(w http.ResponseWriter, r *http.Request, s session) {
	id := r.PathValue("id")
	if err := s.allow(auth.ScopeAdmin, ""); err != nil {
		h.failErr(w, r, err)
		return
	}
	if fe := webhook.CheckID("id", id); fe != nil {
		h.fail(w, r, http.StatusBadRequest, fe.Detail)
		return
	}
	if h.webhooks == nil {
		h.fail(w, r, http.StatusNotFound, "This server delivers no webhooks.")
		return
	}
	ctx := r.Context()
	sub, err := h.webhooks.Get(ctx, id)
	if lock.ErrorCode(err) == webhook.CodeNotFound || (err == nil && !mayManage(s, sub.Prefix)) {
		// As the API: a subscription the key may not manage is not shown.
		h.fail(w, r, http.StatusNotFound, fmt.Sprintf("There is no webhook %q.", id))
		return
	}
	if err != nil {
		h.failErr(w, r, err)
		return
	}
	after := r.URL.Query().Get("after")
	if after != "" {
		if _, _, ok := lock.ParseEventID(after); !ok {
			h.fail(w, r, http.StatusBadRequest, "after must be an event id.")
			return
		}
	}
	dls, err := h.webhooks.DeadLetters(ctx, id, after, deadLetterPageSize+1)
	if err != nil {
		h.failErr(w, r, err)
		return
	}
	p := deadLettersPage{chrome: h.chrome(s, "Dead letters of "+id), Webhook: webhookView{ID: sub.ID, URL: sub.URL, Prefix: sub.Prefix, Source: sub.Source}}
	if len(dls) > deadLetterPageSize {
		dls = dls[:deadLetterPageSize]
		p.NextAfter = dls[len(dls)-1].EventID
	}
	for _, d := range dls {
		p.DeadLetters = append(p.DeadLetters, deadLetterView{
			EventID: d.EventID, FailedAt: d.FailedAt.UTC().Format(timeFormat), Attempts: d.Attempts,
			LastStatus: d.LastStatus, LastError: d.LastError, Payload: string(d.Payload),
		})
	}
	h.render(w, r, http.StatusOK, "deadletters", p)
}
