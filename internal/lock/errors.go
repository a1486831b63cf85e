package lock

import (
	"errors"
	"fmt"
	"time"
)

// Code classifies an error so that every layer can answer it the same way:
// the HTTP layer maps codes to statuses and problem types.
type Code string

const (
	CodeHeld        Code = "held"        // another owner holds the lock (HTTP 409)
	CodeLeaseLost   Code = "lease-lost"  // the lease expired, was superseded or never existed (410)
	CodeInvalid     Code = "invalid"     // the input is malformed (400)
	CodeForbidden   Code = "forbidden"   // the caller may not do this (403)
	CodeUnavailable Code = "unavailable" // the store cannot be reached (503)
	// CodeLimitMismatch: the acquire's limit (or lack of one) differs from
	// the held lock's (409).
	CodeLimitMismatch Code = "limit-mismatch"
	// CodeUpgrade: a shared holder asked for the exclusive lock, which would
	// wait for itself (409).
	CodeUpgrade Code = "upgrade-refused"
	// CodeUnsupported: this store cannot do what was asked (a semaphore in
	// redlock mode, say), whatever the input (501).
	CodeUnsupported Code = "unsupported"
	// CodeQuotaExceeded: the caller's principal already has as many of a
	// thing that outlives a request (sessions, webhooks) as the server
	// allows one principal (429).
	CodeQuotaExceeded Code = "quota-exceeded"
	CodeInternal      Code = "internal" // anything else: a bug (500)
)

// Error is lockapi's one error type. Detail is safe to show to clients; Err,
// the cause, is not and goes only to logs.
type Error struct {
	Code   Code
	Detail string
	// HeldBy describes the holder when Code is CodeHeld.
	HeldBy *HeldBy
	// Fields lists the offending inputs when Code is CodeInvalid.
	Fields []FieldError
	// Oldest is the oldest event id kept when Code is CodeEventsGone.
	Oldest string
	// RetryIn is the lock-delay left when Code is CodeLockDelay.
	RetryIn time.Duration
	Err     error
}

// HeldBy is what a refused acquirer learns of the holder.
type HeldBy struct {
	// Owner and Token describe a lease in the way; Owner is "" when only
	// the queue is (the lock is free but others arrived first).
	Owner string
	Token uint64
	// ExpiresIn is when to look again at the latest: the lease in the way
	// ends then, or the queue's head must have renewed its place, whichever
	// comes first. It is a hint for retrying (Retry-After), not the
	// holder's expiry: see LeaseExpiresIn.
	ExpiresIn time.Duration
	// LeaseExpiresIn is the remaining TTL of the lease named by Owner and
	// Token (0 when none is named): what a caller is told as the holder's
	// expiry. A queue's renewal deadline never shortens it.
	LeaseExpiresIn time.Duration
	// Queue is the number of queued waiters.
	Queue int
	// Queued is true when the acquire holds a place in the queue, which its
	// waiter must keep renewing (see QueueRenewal).
	Queued bool
	// Unconfirmed is true when something is in the way but the store cannot
	// name a granted lease (redlock mode, when its masters do not agree on
	// one): Owner is "" and Token 0, and the refusal promises only that
	// this acquire took no effect.
	Unconfirmed bool
}

// FieldError names one invalid input.
type FieldError struct {
	Field  string
	Detail string
}

func (e *Error) Error() string {
	msg := string(e.Code) + ": " + e.Detail
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

func (e *Error) Unwrap() error { return e.Err }

// ErrorCode returns the code of err, CodeInternal for errors that are not
// *Error, and "" for nil.
func ErrorCode(err error) Code {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return CodeInternal
}

// AsError returns err as *Error, wrapping foreign errors as internal ones.
func AsError(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return &Error{Code: CodeInternal, Detail: "internal error", Err: err}
}

// Held builds the error for a lock held by someone else.
func Held(name string, by HeldBy) *Error {
	return &Error{Code: CodeHeld, Detail: fmt.Sprintf("lock %q is held by another owner", name), HeldBy: &by}
}

// LeaseLost builds the error for a lease that is no longer the holder.
func LeaseLost(name, leaseID string) *Error {
	return &Error{Code: CodeLeaseLost, Detail: fmt.Sprintf("lease %q no longer holds lock %q: it expired, was released or force-released, or never existed", leaseID, name)}
}

// NotYourLease builds the error for a lease acquired by another principal.
func NotYourLease(name, leaseID string) *Error {
	return &Error{Code: CodeForbidden, Detail: fmt.Sprintf("lease %q of lock %q was acquired by another principal", leaseID, name)}
}

// Unavailable wraps a store failure.
func Unavailable(err error) *Error {
	return &Error{Code: CodeUnavailable, Detail: "the lock store is unavailable", Err: err}
}

// Unsupported is the error of a feature that this store does not offer.
func Unsupported(detail string) *Error {
	return &Error{Code: CodeUnsupported, Detail: detail}
}

// QuotaExceeded is the refusal to create one more of what (plural:
// "sessions") for a principal that has max of them.
func QuotaExceeded(what string, max int) *Error {
	return &Error{Code: CodeQuotaExceeded, Detail: fmt.Sprintf("your principal already has %d live %s, the most this server allows one principal; end one first", max, what)}
}

// Invalid builds a validation error from the fields that failed.
func Invalid(fields ...FieldError) *Error {
	detail := "invalid request"
	if len(fields) == 1 {
		detail = fields[0].Field + ": " + fields[0].Detail
	} else if len(fields) > 1 {
		detail = fmt.Sprintf("%d invalid fields", len(fields))
	}
	return &Error{Code: CodeInvalid, Detail: detail, Fields: fields}
}

// LimitMismatch builds the error for an acquire whose limit differs from
// the held lock's.
func LimitMismatch(name string, want, held int) *Error {
	have := "a lock, not a semaphore"
	if held > 0 {
		have = fmt.Sprintf("a semaphore with %d permits", held)
	}
	asked := "a lock"
	if want > 0 {
		asked = fmt.Sprintf("a semaphore with %d permits", want)
	}
	return &Error{Code: CodeLimitMismatch, Detail: fmt.Sprintf("%q is held as %s; this acquire asked for %s. The limit is fixed while any lease is held", name, have, asked)}
}

// UpgradeRefused builds the error for a shared holder asking for the
// exclusive lock.
func UpgradeRefused(name, owner string) *Error {
	return &Error{Code: CodeUpgrade, Detail: fmt.Sprintf("owner %q holds a shared lease of %q and may not also take it exclusively: it would wait for itself. Release the shared lease first", owner, name)}
}
