package http_test

import (
	"io"
	"testing"
	"time"

	lockhttp "github.com/lockapi/lockapi/internal/http"
)

// TestHangupWatch_FailureRestarts breaks the epoll wait that watches parked
// connections: the failure is logged and counted, and hang-ups are seen
// after it as before.
func TestHangupWatch_FailureRestarts(t *testing.T) {
	e := MustOpenHookedEnv(t, lockhttp.Config{})
	e.Acquire("q", `{"owner":"a","ttl_ms":600000}`)
	before := lockhttp.FailHangupWatch()
	// The wait fails at once, or after this hang-up if it was asleep.
	for _, id := range []string{"hangup-1", "hangup-2"} {
		c := dialRaw(t, e)
		c.send(request("POST", "/v1/locks/q/leases", `{"owner":"b","wait_ms":60000}`, "X-Request-ID", id))
		Within(t, e.Hooks.Watching, "waiter registered")
		waitParked(t, e, 1)
		c.conn.Close()
		Within(t, e.Hooks.Unwatched, "hang-up of "+id+" seen")
		waitParked(t, e, 0)
	}
	if n := lockhttp.HangupWatchFailures(); n <= before {
		t.Errorf("failures counted: %d, want more than %d", n, before)
	}
	logged := false
	for _, line := range e.Logs.Lines(t) {
		logged = logged || line["message"] == "hang-up watch failed; restarted"
	}
	if !logged {
		t.Error("the failure was not logged")
	}
}

// TestPark_AnswerPanicStopsHangupWatch: a parked answer panics before it
// stops its hang-up watch. The last resort closes the connection, and
// stops the watch too: the hang-up watch lets go of the connection.
func TestPark_AnswerPanicStopsHangupWatch(t *testing.T) {
	e := MustOpenHookedEnv(t, lockhttp.Config{})
	holder := e.Acquire("q", `{"owner":"a","ttl_ms":600000}`)
	_, last := lockhttp.HangupsWatchedSince(0) // earlier tests' are let go of in their own time
	c := dialRaw(t, e)
	_ = c.conn.SetReadDeadline(time.Now().Add(promptly))
	c.send(request("POST", "/v1/locks/q/leases", `{"owner":"b","wait_ms":60000}`))
	Within(t, e.Hooks.Watching, "waiter watching")
	waitParked(t, e, 1)
	// Parked (counted) a moment before its hang-up watch starts.
	for deadline := time.Now().Add(promptly); ; time.Sleep(time.Millisecond) {
		if n, _ := lockhttp.HangupsWatchedSince(last); n == 1 {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("hang-up watch holds %d of this test's, want 1", n)
		}
	}
	lockhttp.FailNextWaitEnd()
	e.Do("DELETE", "/v1/locks/q/leases/"+holder.LeaseID, "")

	if _, err := io.ReadAll(c.r); err != nil {
		t.Fatalf("connection not closed: %v", err)
	}
	waitParked(t, e, 0)
	if n, _ := lockhttp.HangupsWatchedSince(last); n != 0 {
		t.Fatalf("hang-up watch holds %d of this test's after the answer, want 0", n)
	}
}
