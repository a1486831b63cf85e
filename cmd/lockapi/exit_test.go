package main

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/lockapi/lockapi/client"
)

// One mapping from the SDK's errors to exit statuses serves run, status
// and events.
func TestExitCode(t *testing.T) {
	problem := func(status int, slug string) error {
		return fmt.Errorf("lockapi: acquire: %w", &client.ProblemError{Status: status, Type: "https://lockapi.dev/problems/" + slug})
	}
	for _, tc := range []struct {
		name string
		err  error
		want int
	}{
		{"held", &client.HeldError{Lock: "job", Owner: "other"}, exitTempFail},
		{"lock-delay", fmt.Errorf("lockapi: acquire: %w", &client.LockDelayError{Lock: "job", Remaining: time.Second}), exitTempFail},
		{"invalid", problem(400, "invalid-request"), exitUsage},
		{"limit-mismatch", problem(409, "limit-mismatch"), exitUsage},
		{"upgrade-refused", problem(409, "upgrade-refused"), exitUsage},
		{"unauthorized", problem(401, "unauthorized"), exitNoPerm},
		{"forbidden", problem(403, "forbidden"), exitNoPerm},
		{"lease-lost", problem(410, "lease-lost"), exitLeaseLost},
		{"events-gone", problem(410, "events-gone"), exitUsage},
		{"unavailable", problem(503, "unavailable"), exitUnavailable},
		{"rate-limited", problem(429, "rate-limited"), exitUnavailable},
		{"internal", problem(500, "internal"), exitUnavailable},
		{"not reached", fmt.Errorf("%w: dial tcp: connection refused", client.ErrUnavailable), exitUnavailable},
		{"no answer", errors.New("EOF"), exitUnavailable},
	} {
		if got := exitCode(tc.err); got != tc.want {
			t.Errorf("%s: exit %d, want %d", tc.name, got, tc.want)
		}
	}
}
