package webhook

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"
)

// DefaultTimeout bounds one delivery attempt, from dialing to the end of
// the receiver's answer.
const DefaultTimeout = 10 * time.Second

// userAgent names lockapi to receivers.
const userAgent = "lockapi-webhooks/1"

// maxAnswer is how much of a receiver's answer is read: enough to keep the
// connection for the next delivery, and nothing is kept.
const maxAnswer = 64 << 10

// Outcome is how one delivery attempt ended (the outcome label of
// lockapi_webhook_deliveries_total), or that an event was given up.
type Outcome string

const (
	OutcomeDelivered   Outcome = "delivered"     // the receiver answered 2xx
	OutcomeRejected    Outcome = "rejected"      // it answered something else (3xx included: redirects are not followed)
	OutcomeUnreachable Outcome = "unreachable"   // no answer: DNS, connection, TLS or the timeout failed
	OutcomeRefused     Outcome = "refused"       // the destination is not allowed (a private address)
	OutcomeDeadLetter  Outcome = "dead_lettered" // the event was given up and kept as a dead letter
)

// Attempt is what one delivery attempt found.
type Attempt struct {
	Outcome Outcome
	// Status is the receiver's HTTP status, 0 when it gave none.
	Status int
	// Err says why the attempt failed; nil when it was delivered.
	Err      error
	Duration time.Duration
	// RetryAfter is the receiver's Retry-After, in seconds, on a 429 or
	// 503: the next attempt waits at least that long.
	RetryAfter time.Duration
}

// OK reports whether the receiver took the message.
func (a Attempt) OK() bool { return a.Outcome == OutcomeDelivered }

// kind is what an attempt is to the slots: a ping, or a delivery by a
// worker, which the webhook's last attempt classes.
type kind int

const (
	// kindLive: the webhook's last attempt was delivered.
	kindLive kind = iota
	// kindNew: the worker has made no attempt yet.
	kindNew
	// kindFailing: the webhook's last attempt failed; it is on probation.
	kindFailing
	// kindPing: a ping asked over the API.
	kindPing
)

// sender makes delivery attempts: each a signed POST through a transport
// that dials only addresses the Policy allows, follows no redirect and
// uses no proxy (a proxy would dial for us, unchecked). No more than
// maxDeliveries background attempts run at once (slots), a quarter of
// them at most for webhooks on probation; pings have slots of their own,
// as many, so that no delivery holds one up.
type sender struct {
	client  *http.Client
	policy  Policy
	timeout time.Duration
	slots   *slots
	pings   *slots
	now     func() time.Time
}

func newSender(p Policy, timeout time.Duration, maxDeliveries int) *sender {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	slots := newSlots(maxDeliveries)
	tr := &http.Transport{
		Proxy:                 nil,
		DialContext:           p.DialContext,
		ForceAttemptHTTP2:     true,
		TLSHandshakeTimeout:   timeout,
		ResponseHeaderTimeout: timeout,
		// As many kept-alive connections as one host may use at once, so
		// that a busy receiver's deliveries reuse them.
		MaxIdleConnsPerHost: slots.perHost,
		IdleConnTimeout:     90 * time.Second,
	}
	return &sender{
		client: &http.Client{
			Transport: tr,
			// A redirect could point anywhere, another host or a
			// private address: it is answered as a failure.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		policy:  p,
		timeout: timeout,
		slots:   slots,
		pings:   newSlots(maxDeliveries),
		now:     time.Now,
	}
}

// send POSTs one signed message to sub's URL once a delivery slot is free.
// A worker's attempt gets its time limit with the slot: waiting for one is
// not the receiver's time. A ping's time limit starts at once and covers
// the wait, so that its asker gets an answer within it. Unless the
// webhook's last attempt was delivered, its host is looked up before the
// wait for a slot: a name that does not resolve, however slowly the DNS
// says so, holds no slot. The Attempt's Duration counts from the call, waits included. It
// fails, unreachable, when ctx ends first.
func (s *sender) send(ctx context.Context, sub Subscription, id string, body []byte, k kind) Attempt {
	start := s.now()
	a := s.attempt(ctx, sub, id, body, k)
	a.Duration = s.now().Sub(start)
	return a
}

func (s *sender) attempt(ctx context.Context, sub Subscription, id string, body []byte, k kind) Attempt {
	host := hostOf(sub.URL)
	pool := s.slots
	if k == kindPing {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.timeout)
		defer cancel()
		pool = s.pings
	}
	if k != kindLive {
		if a, ok := s.lookUp(ctx, host); !ok {
			return a
		}
	}
	release, err := pool.take(ctx, host, k == kindFailing)
	if err != nil {
		return Attempt{Outcome: OutcomeUnreachable, Err: fmt.Errorf("no delivery slot was free: %w", err)}
	}
	defer release()
	if k != kindPing {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.timeout)
		defer cancel()
	}
	return s.post(ctx, sub, id, body, s.now())
}

// lookUp checks that host resolves to allowed addresses within the attempt
// timeout; when it does not, the failed Attempt says why. The dial looks
// the host up again and checks what it finds (DNS rebinding).
func (s *sender) lookUp(ctx context.Context, host string) (Attempt, bool) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	_, err := s.policy.Resolve(ctx, "ip", host)
	if err == nil {
		return Attempt{}, true
	}
	if re, ok := errors.AsType[*RefusedError](err); ok {
		return Attempt{Outcome: OutcomeRefused, Err: re}, false
	}
	return Attempt{Outcome: OutcomeUnreachable, Err: err}, false
}

func (s *sender) post(ctx context.Context, sub Subscription, id string, body []byte, at time.Time) Attempt {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, sub.URL, bytes.NewReader(body))
	if err != nil {
		return Attempt{Outcome: OutcomeRefused, Err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", userAgent)
	SignHeaders(req.Header, sub.Secrets, id, at, body)
	resp, err := s.client.Do(req)
	if err != nil {
		if re, ok := errors.AsType[*RefusedError](err); ok {
			return Attempt{Outcome: OutcomeRefused, Err: re}
		}
		return Attempt{Outcome: OutcomeUnreachable, Err: err}
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxAnswer))
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return Attempt{Outcome: OutcomeDelivered, Status: resp.StatusCode}
	}
	a := Attempt{Outcome: OutcomeRejected, Status: resp.StatusCode, Err: fmt.Errorf("the receiver answered %s", resp.Status)}
	if resp.StatusCode >= 300 && resp.StatusCode < 400 {
		a.Err = fmt.Errorf("the receiver answered %s: redirects are not followed; subscribe the final URL", resp.Status)
	}
	if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable {
		if secs, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && secs > 0 {
			a.RetryAfter = time.Duration(secs) * time.Second
		}
	}
	return a
}
