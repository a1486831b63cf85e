package client

import (
	"context"
	"net/http"
	"time"

	"github.com/lockapi/lockapi/client/api"
	"github.com/lockapi/lockapi/event"
)

// Webhook is a subscription of a URL to lock events (docs/WEBHOOKS.md),
// without its secret.
type Webhook struct {
	ID     string
	URL    string
	Prefix string      // the locks whose names start with it; "" for all
	Types  []EventType // the types delivered; none for every type
	// Source is "api" for webhooks created through the API, "file" for
	// those of LOCKAPI_WEBHOOKS_FILE.
	Source string
	// CreatedAt is zero for the file's webhooks.
	CreatedAt time.Time
	// WorkerLease says who holds the lease that lets a worker deliver the
	// webhook: "worker", "free", "other" (nothing is delivered until it
	// ends) or "unknown"; "" when the server did not say.
	WorkerLease string
}

// WebhookOptions is a webhook to create.
type WebhookOptions struct {
	// URL is where to POST events: https (http only on a server that
	// allows private destinations).
	URL    string
	Prefix string
	Types  []EventType
}

// webhookJSON is a webhook on the wire, with the secret of a new one.
type webhookJSON struct {
	ID          string      `json:"id"`
	URL         string      `json:"url"`
	Prefix      string      `json:"prefix"`
	Types       []EventType `json:"types"`
	Source      string      `json:"source"`
	CreatedAt   *time.Time  `json:"created_at"`
	WorkerLease *string     `json:"worker_lease"`
	Secret      string      `json:"secret"`
}

func (w *webhookJSON) webhook() *Webhook {
	out := &Webhook{ID: w.ID, URL: w.URL, Prefix: w.Prefix, Types: w.Types, Source: w.Source}
	if w.CreatedAt != nil {
		out.CreatedAt = *w.CreatedAt
	}
	if w.WorkerLease != nil {
		out.WorkerLease = *w.WorkerLease
	}
	return out
}

// CreateWebhook subscribes opts.URL to lock events, as an admin. secret,
// shown only this once, is what the receiver verifies deliveries with
// (VerifyWebhook).
func (c *Client) CreateWebhook(ctx context.Context, opts WebhookOptions) (w *Webhook, secret string, err error) {
	body := api.CreateWebhookRequest{URL: opts.URL}
	if opts.Prefix != "" {
		body.Prefix = &opts.Prefix
	}
	if len(opts.Types) > 0 {
		types := make([]api.EventType, len(opts.Types))
		for i, t := range opts.Types {
			types[i] = api.EventType(t)
		}
		body.Types = &types
	}
	var out webhookJSON
	err = c.call(ctx, "create webhook", "", 0, func(ctx context.Context) (*http.Response, error) {
		return c.api.CreateWebhook(ctx, body)
	}, http.StatusCreated, &out)
	if err != nil {
		return nil, "", err
	}
	return out.webhook(), out.Secret, nil
}

// ListWebhooks returns every webhook.
func (c *Client) ListWebhooks(ctx context.Context) ([]*Webhook, error) {
	var list struct {
		Webhooks []webhookJSON `json:"webhooks"`
	}
	err := c.call(ctx, "list webhooks", "", 0, func(ctx context.Context) (*http.Response, error) {
		return c.api.ListWebhooks(ctx)
	}, http.StatusOK, &list)
	if err != nil {
		return nil, err
	}
	out := make([]*Webhook, 0, len(list.Webhooks))
	for i := range list.Webhooks {
		out = append(out, list.Webhooks[i].webhook())
	}
	return out, nil
}

// GetWebhook returns the webhook id; one that does not exist is a
// *ProblemError with Status 404.
func (c *Client) GetWebhook(ctx context.Context, id string) (*Webhook, error) {
	var out webhookJSON
	err := c.call(ctx, "get webhook "+id, "", 0, func(ctx context.Context) (*http.Response, error) {
		return c.api.GetWebhook(ctx, id)
	}, http.StatusOK, &out)
	if err != nil {
		return nil, err
	}
	return out.webhook(), nil
}

// DeleteWebhook deletes the webhook id: nothing more is delivered to it.
func (c *Client) DeleteWebhook(ctx context.Context, id string) error {
	return c.call(ctx, "delete webhook "+id, "", 0, func(ctx context.Context) (*http.Response, error) {
		return c.api.DeleteWebhook(ctx, id)
	}, http.StatusNoContent, nil)
}

// PingResult is how a test delivery went.
type PingResult struct {
	// EventID is the ping's id, its webhook-id header.
	EventID   string
	Delivered bool // the receiver answered 2xx
	// Outcome is "delivered", "rejected" (another status), "unreachable"
	// or "refused" (the destination is not allowed).
	Outcome  string
	Status   int    // the receiver's status; 0 when it gave none
	Error    string // why it failed; "" when delivered
	Duration time.Duration
}

// PingWebhook delivers a ping event to the webhook id now, signed as every
// delivery is, and says how it went.
func (c *Client) PingWebhook(ctx context.Context, id string) (*PingResult, error) {
	var res api.PingResult
	err := c.call(ctx, "ping webhook "+id, "", 0, func(ctx context.Context) (*http.Response, error) {
		return c.api.PingWebhook(ctx, id)
	}, http.StatusOK, &res)
	if err != nil {
		return nil, err
	}
	out := &PingResult{EventID: res.EventID, Delivered: res.Delivered, Outcome: string(res.Outcome),
		Duration: time.Duration(res.DurationMs) * time.Millisecond}
	if res.Status != nil {
		out.Status = int(*res.Status)
	}
	if res.Error != nil {
		out.Error = *res.Error
	}
	return out, nil
}

// DeadLetter is an event whose delivery to a webhook was given up.
type DeadLetter struct {
	Event      Event
	Attempts   int
	FailedAt   time.Time
	LastError  string
	LastStatus int // 0 when the receiver gave none
}

// DeadLetterPage is one page of ListDeadLetters.
type DeadLetterPage struct {
	DeadLetters []DeadLetter
	// NextAfter is the after of the next page; "" on the last.
	NextAfter string
}

// ListDeadLetters returns a page of the webhook id's dead letters, oldest
// first, after the event id after ("" from the first); limit 0 is the
// server's default.
func (c *Client) ListDeadLetters(ctx context.Context, id, after string, limit int) (*DeadLetterPage, error) {
	params := &api.ListDeadLettersParams{}
	if after != "" {
		params.After = &after
	}
	if limit > 0 {
		params.Limit = &limit
	}
	var list struct {
		DeadLetters []struct {
			Event      event.Event `json:"event"`
			Attempts   int         `json:"attempts"`
			FailedAt   time.Time   `json:"failed_at"`
			LastError  string      `json:"last_error"`
			LastStatus *int        `json:"last_status"`
		} `json:"dead_letters"`
		NextAfter *string `json:"next_after"`
	}
	err := c.call(ctx, "list dead letters of "+id, "", 0, func(ctx context.Context) (*http.Response, error) {
		return c.api.ListDeadLetters(ctx, id, params)
	}, http.StatusOK, &list)
	if err != nil {
		return nil, err
	}
	page := &DeadLetterPage{DeadLetters: make([]DeadLetter, 0, len(list.DeadLetters))}
	for _, d := range list.DeadLetters {
		dl := DeadLetter{Event: d.Event, Attempts: d.Attempts, FailedAt: d.FailedAt, LastError: d.LastError}
		if d.LastStatus != nil {
			dl.LastStatus = *d.LastStatus
		}
		page.DeadLetters = append(page.DeadLetters, dl)
	}
	if list.NextAfter != nil {
		page.NextAfter = *list.NextAfter
	}
	return page, nil
}

// ReplayDeadLetter queues the dead letter eventID of the webhook id for
// delivery again.
func (c *Client) ReplayDeadLetter(ctx context.Context, id, eventID string) error {
	return c.call(ctx, "replay dead letter "+eventID, "", 0, func(ctx context.Context) (*http.Response, error) {
		return c.api.ReplayDeadLetter(ctx, id, eventID)
	}, http.StatusAccepted, nil)
}
