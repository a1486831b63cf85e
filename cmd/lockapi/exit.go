package main

import (
	"errors"
	"net/http"
	"strings"

	"github.com/lockapi/lockapi/client"
)

// Exit statuses of `lockapi run`, `status` and `events` besides the
// command's own, after sysexits.h where one fits.
const (
	exitUsage       = 2   // bad flags or arguments, or input the server refused (400)
	exitUnavailable = 69  // EX_UNAVAILABLE: the server could not be reached or failed
	exitLeaseLost   = 70  // EX_SOFTWARE: the lease was lost while the command ran
	exitTempFail    = 75  // EX_TEMPFAIL: the lock stayed held (or closed for a lock-delay) for all of --wait
	exitNoPerm      = 77  // EX_NOPERM: the server refused the API key (401, 403)
	exitCannotExec  = 126 // the command was found but could not be started
	exitNotFound    = 127 // the command was not found
)

// problemEventsGone is the problem type of a resume point older than the
// server's event log keeps.
const problemEventsGone = "https://lockapi.dev/problems/events-gone"

// exitCode is the exit status for err, an error of the Go SDK: the one
// mapping of the subcommands that talk to a server.
func exitCode(err error) int {
	if client.IsHeld(err) || client.IsLockDelay(err) {
		return exitTempFail // waiting longer may mend it
	}
	pe, ok := errors.AsType[*client.ProblemError](err)
	if !ok {
		return exitUnavailable // not reached, or no answer
	}
	switch pe.Status {
	case http.StatusBadRequest:
		return exitUsage
	case http.StatusConflict:
		// limit-mismatch or upgrade-refused (webhook-exists and
		// webhook-read-only, of routes no subcommand here takes):
		// asking again would not help.
		return exitUsage
	case http.StatusUnauthorized, http.StatusForbidden:
		return exitNoPerm
	case http.StatusGone:
		if pe.Type == problemEventsGone {
			return exitUsage // start again without --after
		}
		return exitLeaseLost
	}
	return exitUnavailable
}

// errText is err's message without the client's "lockapi: " prefix, for
// lines that have their own.
func errText(err error) string { return strings.TrimPrefix(err.Error(), "lockapi: ") }
