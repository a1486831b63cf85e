package http

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/rs/zerolog"

	"github.com/lockapi/lockapi/internal/lock"
	"github.com/lockapi/lockapi/internal/webhook"
)

// ProblemTypeBase prefixes every problem type slug; the resulting URIs are
// part of the contract and never change.
const ProblemTypeBase = "https://lockapi.dev/problems/"

// StatusClientClosedRequest is logged (nginx's convention) for a request
// whose client went away before the answer; nobody reads that answer.
const StatusClientClosedRequest = 499

// problemKind is one row of the problem type table in openapi.yaml.
type problemKind struct {
	status int
	slug   string
	title  string
}

var (
	kindInvalid      = problemKind{http.StatusBadRequest, "invalid-request", "Invalid request"}
	kindNotFound     = problemKind{http.StatusNotFound, "not-found", "Not found"}
	kindMethod       = problemKind{http.StatusMethodNotAllowed, "method-not-allowed", "Method not allowed"}
	kindHeld         = problemKind{http.StatusConflict, "lock-held", "Lock held"}
	kindLimit        = problemKind{http.StatusConflict, "limit-mismatch", "Limit mismatch"}
	kindUpgrade      = problemKind{http.StatusConflict, "upgrade-refused", "Upgrade refused"}
	kindLeaseLost    = problemKind{http.StatusGone, "lease-lost", "Lease lost"}
	kindEventsGone   = problemKind{http.StatusGone, "events-gone", "Events gone"}
	kindTooLarge     = problemKind{http.StatusRequestEntityTooLarge, "payload-too-large", "Payload too large"}
	kindMediaType    = problemKind{http.StatusUnsupportedMediaType, "unsupported-media-type", "Unsupported media type"}
	kindUnauthorized = problemKind{http.StatusUnauthorized, "unauthorized", "Unauthorized"}
	kindForbidden    = problemKind{http.StatusForbidden, "forbidden", "Forbidden"}
	kindReserved     = problemKind{http.StatusForbidden, "reserved-name", "Reserved name"}
	kindRateLimited  = problemKind{http.StatusTooManyRequests, "rate-limited", "Too many requests"}
	kindQuota        = problemKind{http.StatusTooManyRequests, "quota-exceeded", "Quota exceeded"}
	kindInternal     = problemKind{http.StatusInternalServerError, "internal", "Internal server error"}
	kindUnavailable  = problemKind{http.StatusServiceUnavailable, "unavailable", "Service unavailable"}
	kindEventsOff    = problemKind{http.StatusNotImplemented, "events-disabled", "Events disabled"}
	kindUnsupported  = problemKind{http.StatusNotImplemented, "unsupported", "Not supported by this store"}

	kindSessionLost     = problemKind{http.StatusGone, "session-lost", "Session lost"}
	kindSessionNotFound = problemKind{http.StatusNotFound, "session-not-found", "Session not found"}
	kindLockDelay       = problemKind{http.StatusConflict, "lock-delay", "Lock delay"}
)

// Problem types of webhooks (internal/webhook).
var (
	kindWebhookExists   = problemKind{http.StatusConflict, "webhook-exists", "Webhook exists"}
	kindWebhookReadOnly = problemKind{http.StatusConflict, "webhook-read-only", "Webhook read-only"}
	kindWebhooksOff     = problemKind{http.StatusNotImplemented, "webhooks-disabled", "Webhooks disabled"}
)

// codeKinds maps the domain's error codes to problem types.
var codeKinds = map[lock.Code]problemKind{
	lock.CodeInvalid:       kindInvalid,
	lock.CodeForbidden:     kindForbidden,
	lock.CodeHeld:          kindHeld,
	lock.CodeLimitMismatch: kindLimit,
	lock.CodeUpgrade:       kindUpgrade,
	lock.CodeLeaseLost:     kindLeaseLost,
	lock.CodeEventsGone:    kindEventsGone,
	lock.CodeUnavailable:   kindUnavailable,
	lock.CodeUnsupported:   kindUnsupported,
	lock.CodeQuotaExceeded: kindQuota,
	lock.CodeInternal:      kindInternal,

	lock.CodeSessionLost:     kindSessionLost,
	lock.CodeSessionNotFound: kindSessionNotFound,
	lock.CodeLockDelay:       kindLockDelay,

	webhook.CodeNotFound: kindNotFound,
	webhook.CodeExists:   kindWebhookExists,
	webhook.CodeReadOnly: kindWebhookReadOnly,
}

// httpError is a failure of the HTTP exchange itself, which the domain has
// no code for: no such route, a wrong method, a body that is too large or not
// JSON.
type httpError struct {
	kind   problemKind
	detail string
}

func (e *httpError) Error() string { return e.kind.slug + ": " + e.detail }

// errShuttingDown answers the requests that were waiting when Close began.
var errShuttingDown = &lock.Error{Code: lock.CodeUnavailable, Detail: "server is shutting down"}

// Problem is an RFC 9457 problem detail, the body of every error response.
type Problem struct {
	Type     string `json:"type"`
	Title    string `json:"title"`
	Status   int    `json:"status"`
	Detail   string `json:"detail"`
	Instance string `json:"instance,omitempty"`
	// Lock names the lock of a conflict (lock-held, limit-mismatch,
	// upgrade-refused): of several, the one in the way.
	Lock string `json:"lock,omitempty"`
	// Holder is the lease in the way of a lock-held problem; absent when
	// only queued waiters are.
	Holder *ProblemHolder `json:"holder,omitempty"`
	// QueueLength counts the lock's queued waiters, on lock-held.
	QueueLength *int `json:"queue_length,omitempty"`
	// LockDelayRemainingMs is what is left of the lock-delay, on
	// lock-delay.
	LockDelayRemainingMs int64        `json:"lock_delay_remaining_ms,omitempty"`
	Errors               []FieldError `json:"errors,omitempty"`
	// OldestID is the oldest event the log keeps, on events-gone: absent
	// when it keeps none.
	OldestID string `json:"oldest_id,omitempty"`
}

// ProblemHolder is the holder extension of a lock-held problem.
type ProblemHolder struct {
	Owner        string `json:"owner"`
	FencingToken uint64 `json:"fencing_token"`
	ExpiresInMs  int64  `json:"expires_in_ms"`
}

// FieldError is one entry of an invalid-request problem's errors extension.
type FieldError struct {
	Field  string `json:"field"`
	Detail string `json:"detail"`
}

// Error writes err as an application/problem+json response. It is the only
// place that turns errors into responses: it maps lock.ErrorCode (and the
// HTTP layer's own failures) to a status and problem type, and logs only
// internal and unavailable errors, with their cause. Internal errors are
// answered with a generic detail.
func Error(w http.ResponseWriter, r *http.Request, err error) {
	// A client that went away reads no answer; record it for the access log.
	if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
		w.WriteHeader(StatusClientClosedRequest)
		return
	}

	p, retryAfter := newProblem(r, err)
	p.Instance = r.URL.EscapedPath()
	if retryAfter > 0 {
		w.Header().Set("Retry-After", strconv.FormatInt(retryAfter, 10))
	}
	// A rate limit passes with time; a quota only when the principal ends
	// what it holds, so its 429 carries no Retry-After.
	if p.Type == ProblemTypeBase+kindRateLimited.slug && w.Header().Get("Retry-After") == "" {
		w.Header().Set("Retry-After", "1")
	}

	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(p.Status)
	if err := encodeJSON(w, p); err != nil {
		zerolog.Ctx(r.Context()).Debug().Err(err).Msg("write problem")
	}
}

// newProblem maps err to its problem, without an instance, and the seconds
// of its Retry-After (0 for none). It logs internal and unavailable errors:
// Error for a response, and the answers of several operations in one
// response, each with its own problem.
func newProblem(r *http.Request, err error) (p Problem, retryAfterSecs int64) {
	logger := zerolog.Ctx(r.Context())
	var kind problemKind
	var he *httpError
	if errors.As(err, &he) {
		kind, p.Detail = he.kind, he.detail
	} else {
		e := lock.AsError(err)
		var ok bool
		if kind, ok = codeKinds[e.Code]; !ok {
			kind = kindInternal
		}
		p.Detail = e.Detail
		if kind.status == http.StatusConflict {
			if le, ok := errors.AsType[*lock.LockError](err); ok {
				p.Lock = le.Lock
			}
		}
		switch kind {
		case kindInvalid, kindWebhookExists:
			for _, f := range e.Fields {
				p.Errors = append(p.Errors, FieldError{Field: f.Field, Detail: f.Detail})
			}
		case kindHeld:
			if by := e.HeldBy; by != nil {
				p.QueueLength = &by.Queue
				if by.Owner != "" {
					p.Holder = &ProblemHolder{
						Owner:        by.Owner,
						FencingToken: by.Token,
						ExpiresInMs:  max(by.LeaseExpiresIn.Milliseconds(), 0),
					}
				} else if !by.Unconfirmed {
					p.Detail = queuedDetail(p.Lock, by.Queue)
				}
			}
			retryAfterSecs = retryAfter(e)
		case kindLockDelay:
			p.LockDelayRemainingMs = max(ceilMillis(e.RetryIn), 1)
			retryAfterSecs = max(int64((e.RetryIn+time.Second-1)/time.Second), 1)
		case kindEventsGone:
			p.OldestID = e.Oldest
		case kindUnavailable:
			logger.Warn().Err(e.Err).Str("detail", e.Detail).Msg("unavailable")
			retryAfterSecs = 1
		case kindInternal:
			ev := logger.Error().Err(e.Err).Str("code", string(e.Code)).Str("detail", e.Detail)
			var pe *lock.PanicError
			if errors.As(e.Err, &pe) {
				ev = ev.Str("stack", string(pe.Stack))
			}
			ev.Msg("internal error")
			kind, p.Detail = kindInternal, "internal error"
		}
	}
	p.Type, p.Title, p.Status = ProblemTypeBase+kind.slug, kind.title, kind.status
	return p, retryAfterSecs
}

// queuedDetail describes a refusal that no lease caused: waiters that
// arrived first (fair ones, or a writer that readers hold off) come first.
// The lock may be free, or held by leases that would admit this acquire.
func queuedDetail(name string, queue int) string {
	waiters := fmt.Sprintf("%d queued waiters come", queue)
	if queue == 1 {
		waiters = "1 queued waiter comes"
	}
	of := ""
	if name != "" {
		of = fmt.Sprintf(" of lock %q", name)
	}
	return fmt.Sprintf("no lease is in the way, but %s before this acquire%s", waiters, of)
}

// retryAfter is the Retry-After of a lock-held answer: when to look again
// (the holder's lease ends, or the queue's head must have renewed its
// place, whichever is sooner), in whole seconds rounded up, and at least 1.
// It may be sooner than the holder's expires_in_ms: a queue that moves may
// change the answer before the lease ends.
func retryAfter(e *lock.Error) int64 {
	if e.HeldBy == nil {
		return 1
	}
	secs := int64((e.HeldBy.ExpiresIn + time.Second - 1) / time.Second)
	return max(secs, 1)
}
