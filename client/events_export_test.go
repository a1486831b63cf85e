package client

import (
	"testing"
	"time"
)

// SetEventsTiming makes Events reconnect after retry and cut a stream
// silent for idle, until the test ends.
func SetEventsTiming(tb testing.TB, retry, idle time.Duration) {
	base, most, silent := eventsRetryBase, eventsRetryMax, eventsIdleTimeout
	eventsRetryBase, eventsRetryMax, eventsIdleTimeout = retry, retry, idle
	tb.Cleanup(func() { eventsRetryBase, eventsRetryMax, eventsIdleTimeout = base, most, silent })
}
