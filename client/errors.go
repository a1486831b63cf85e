package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/lockapi/lockapi/client/api"
)

// Sentinel errors; test for them with errors.Is.
var (
	// ErrLeaseLost means the lease no longer holds its lock: the server
	// answered 410 lease-lost (it expired or was force-released), or no
	// renewal succeeded in time, so another holder may exist. Stop the
	// guarded work.
	ErrLeaseLost = errors.New("lockapi: lease lost")

	// ErrUnavailable marks a failure that may pass: the server could not be
	// reached, or it answered 503 (store unreachable, shutting down), 429,
	// 502 or 504.
	ErrUnavailable = errors.New("lockapi: server unavailable")

	// ErrReleased is what Lease.Err returns after a Release.
	ErrReleased = errors.New("lockapi: lease released")
)

// HeldError is the answer to an acquire when another owner holds the lock
// (409 lock-held), still after the acquire's Wait.
type HeldError struct {
	Lock string
	// Owner, Token and ExpiresIn describe the lease in the way; Owner is ""
	// when only queued waiters are (a fair queue, or a writer that readers
	// keep out), or, in redlock mode with QueueLength 0, when the masters
	// do not all name one granted lease (docs/TOPOLOGIES.md).
	Owner       string
	Token       uint64        // the holder's fencing token
	ExpiresIn   time.Duration // until the holder's lease ends unless renewed
	QueueLength int           // waiters queued for the lock
	RequestID   string
}

func (e *HeldError) Error() string {
	if e.Owner == "" && e.QueueLength == 0 {
		return fmt.Sprintf("lockapi: lock %q is not free; the holder is not named", e.Lock)
	}
	if e.Owner == "" {
		return fmt.Sprintf("lockapi: lock %q is free but %d queued waiters come first", e.Lock, e.QueueLength)
	}
	return fmt.Sprintf("lockapi: lock %q is held by %q (fencing token %d, expires in %v unless renewed)",
		e.Lock, e.Owner, e.Token, e.ExpiresIn.Round(time.Millisecond))
}

// IsHeld reports whether err says that another owner holds the lock; use
// errors.As with a *HeldError for the holder.
func IsHeld(err error) bool {
	var he *HeldError
	return errors.As(err, &he)
}

// LockDelayError is the answer to an acquire while the lock is closed for
// a lock-delay (409 lock-delay, docs/SESSIONS.md): a lease bound to a
// session ended moments ago by the session's expiry or a force release.
// An acquire with a Wait waits through the delay; this is the answer when
// the delay outlasted it. It unwraps to the *ProblemError of the answer.
type LockDelayError struct {
	Lock string
	// Remaining is what was left of the delay when the server answered.
	Remaining time.Duration
	RequestID string
	problem   *ProblemError
}

func (e *LockDelayError) Error() string {
	return fmt.Sprintf("lockapi: lock %q is closed for a lock-delay for %v more", e.Lock, e.Remaining)
}

// Unwrap returns the problem the server answered.
func (e *LockDelayError) Unwrap() error { return e.problem }

// IsLockDelay reports whether err says that the lock is closed for a
// lock-delay; use errors.As with a *LockDelayError for what is left of it.
func IsLockDelay(err error) bool {
	var de *LockDelayError
	return errors.As(err, &de)
}

// ProblemError is any other error answer of the server, an RFC 9457 problem
// detail (or, from something in between that does not speak it, the bare
// status). errors.Is matches ErrLeaseLost for a 410 and ErrUnavailable for
// statuses worth retrying.
type ProblemError struct {
	Status    int
	Type      string // a https://lockapi.dev/problems/ URI; "" if the body was no problem
	Title     string
	Detail    string
	Fields    []FieldError // the offending inputs of a 400
	RequestID string
	// RetryAfter is the Retry-After header, when the server sent one.
	RetryAfter time.Duration
}

// FieldError is one offending input of a 400 invalid-request problem.
type FieldError struct {
	Field  string
	Detail string
}

func (e *ProblemError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "lockapi: server answered %d", e.Status)
	if slug, ok := strings.CutPrefix(e.Type, problemTypeBase); ok {
		b.WriteString(" " + slug)
	} else if e.Title != "" {
		b.WriteString(" " + e.Title)
	}
	if e.Detail != "" {
		b.WriteString(": " + e.Detail)
	}
	if e.RequestID != "" {
		b.WriteString(" (request id " + e.RequestID + ")")
	}
	return b.String()
}

// Is makes errors.Is(err, ErrLeaseLost) and errors.Is(err, ErrUnavailable)
// work on problems.
func (e *ProblemError) Is(target error) bool {
	switch target {
	case ErrLeaseLost:
		return e.Status == http.StatusGone
	case ErrUnavailable:
		// A quota is not transient: asking again fails until the
		// principal ends sessions or webhooks it holds.
		return transientStatus(e.Status) && e.Type != problemTypeBase+"quota-exceeded"
	}
	return false
}

const problemTypeBase = "https://lockapi.dev/problems/"

// transientStatus reports whether an answer with status may succeed when
// asked again.
func transientStatus(status int) bool {
	switch status {
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

// unavailable wraps a failure to exchange a request with the server.
func unavailable(err error) error {
	return fmt.Errorf("%w: %w", ErrUnavailable, err)
}

// responseError turns a non-2xx answer into a *HeldError, a
// *LockDelayError or a *ProblemError.
func responseError(lockName string, resp *http.Response, body []byte) error {
	p := &ProblemError{
		Status:     resp.StatusCode,
		Title:      http.StatusText(resp.StatusCode),
		RequestID:  resp.Header.Get("X-Request-ID"),
		RetryAfter: retryAfter(resp.Header),
	}
	var doc api.Problem
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); strings.HasSuffix(mt, "json") && json.Unmarshal(body, &doc) == nil && doc.Type != "" {
		p.Type, p.Title, p.Detail = string(doc.Type), doc.Title, doc.Detail
		if doc.Errors != nil {
			for _, f := range *doc.Errors {
				p.Fields = append(p.Fields, FieldError{Field: f.Field, Detail: f.Detail})
			}
		}
		if resp.StatusCode == http.StatusConflict && (doc.Holder != nil || doc.Type == problemTypeBase+"lock-held") {
			he := &HeldError{Lock: lockName, RequestID: p.RequestID}
			if doc.Lock != nil {
				he.Lock = *doc.Lock // of a multi-lock, the name in the way
			}
			if doc.Holder != nil {
				he.Owner, he.Token = doc.Holder.Owner, uint64(doc.Holder.FencingToken)
				he.ExpiresIn = time.Duration(doc.Holder.ExpiresInMs) * time.Millisecond
			}
			if doc.QueueLength != nil {
				he.QueueLength = int(*doc.QueueLength)
			}
			return he
		}
		if resp.StatusCode == http.StatusConflict && doc.Type == problemTypeBase+"lock-delay" {
			de := &LockDelayError{Lock: lockName, RequestID: p.RequestID, Remaining: p.RetryAfter, problem: p}
			if doc.Lock != nil {
				de.Lock = *doc.Lock
			}
			if doc.LockDelayRemainingMs != nil {
				de.Remaining = time.Duration(*doc.LockDelayRemainingMs) * time.Millisecond
			}
			return de
		}
	} else if text := strings.TrimSpace(string(body)); text != "" {
		const maxDetail = 200
		if len(text) > maxDetail {
			text = text[:maxDetail] + "…"
		}
		p.Detail = text
	}
	return p
}

func retryAfter(h http.Header) time.Duration {
	secs, err := strconv.Atoi(h.Get("Retry-After"))
	if err != nil || secs < 0 {
		return 0
	}
	return time.Duration(secs) * time.Second
}
