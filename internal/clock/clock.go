// Package clock holds the one way this server waits for time to pass.
package clock

import (
	"context"
	"time"
)

// Sleep waits d or until ctx ends, and reports whether it waited the full
// d (false: ctx ended). A d <= 0 does not wait.
func Sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
