package http_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	lockhttp "github.com/lockapi/lockapi/internal/http"
	"github.com/lockapi/lockapi/internal/lock"
)

// Slow clients (docs/SECURITY.md, hostile inputs): each is bounded by one of
// the server's timeouts, made small here, and its connection is freed.

// wantClosed fails unless the server closes conn (EOF, or a reset for
// bytes it left unread) within bound of start, reading and dropping what it
// sends before.
func wantClosed(t *testing.T, conn net.Conn, start time.Time, bound time.Duration) {
	t.Helper()
	_ = conn.SetReadDeadline(start.Add(bound))
	_, err := io.Copy(io.Discard, conn)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the connection was still open %v after the request began", bound)
	}
	t.Logf("closed after %v", time.Since(start).Round(time.Millisecond))
}

// TestSlowClient_header: a client that sends its header slowly, silent
// after a first line or a byte at a time, is cut off at the header
// timeout (slowloris), with no answer.
func TestSlowClient_header(t *testing.T) {
	const timeout = 300 * time.Millisecond
	e := MustOpenEnv(t, lockhttp.Config{HeaderTimeout: timeout})
	addr := strings.TrimPrefix(e.URL, "http://")
	for _, trickle := range []bool{false, true} {
		name := map[bool]string{false: "Silent", true: "Trickling"}[trickle]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			start := time.Now()
			if _, err := io.WriteString(conn, "GET /v1/locks/slow HTTP/1.1\r\nHost: lockapi\r\n"); err != nil {
				t.Fatal(err)
			}
			if trickle {
				stop := make(chan struct{})
				defer close(stop)
				go func() {
					tick := time.NewTicker(50 * time.Millisecond)
					defer tick.Stop()
					for {
						select {
						case <-stop:
							return
						case <-tick.C:
							if _, err := conn.Write([]byte("X")); err != nil {
								return
							}
						}
					}
				}()
			}
			wantClosed(t, conn, start, 10*time.Second)
		})
	}
}

// TestSlowClient_chunked_body_without_end: a chunked body whose last chunk
// never comes is answered 400 at the body timeout, its connection closed,
// and the lock it asked for is not taken.
func TestSlowClient_chunked_body_without_end(t *testing.T) {
	const timeout = 300 * time.Millisecond
	e := MustOpenEnv(t, lockhttp.Config{BodyTimeout: timeout})
	conn, err := net.Dial("tcp", strings.TrimPrefix(e.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	start := time.Now()
	head := "POST /v1/locks/chunky/leases HTTP/1.1\r\nHost: lockapi\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{\"own\r\n"
	if _, err := io.WriteString(conn, head); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(start.Add(10 * time.Second))
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	WantProblem(t, Response{Response: resp, Body: body}, http.StatusBadRequest, "invalid-request")
	if _, err := br.ReadByte(); !errors.Is(err, io.EOF) && !isReset(err) {
		t.Fatalf("after the 400 the connection was not closed: %v", err)
	}
	if st := e.State("chunky"); st.Held {
		t.Fatalf("a body that never ended took the lock: %+v", st)
	}
}

// TestSlowClient_event_stream_never_read: an event stream whose client
// never reads is ended once a write blocks past the events write timeout
// (or the feed drops it first), and its place among the caller's waiters
// is freed: with one place per caller, a second stream then opens.
func TestSlowClient_event_stream_never_read(t *testing.T) {
	e := MustOpenEnv(t, lockhttp.Config{EventsWriteTimeout: 300 * time.Millisecond, MaxWaitersPerCaller: 1})
	// A small receive window, so that a few hundred KiB fill the way.
	dialer := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		return c.Control(func(fd uintptr) { _ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
	}}
	conn, err := dialer.Dial("tcp", strings.TrimPrefix(e.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	start := time.Now()
	if _, err := io.WriteString(conn, "GET /v1/events HTTP/1.1\r\nHost: lockapi\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	// The stream holds the caller's one place.
	second := func() int {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.URL+"/v1/events", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	deadline := time.Now().Add(5 * time.Second)
	for second() != http.StatusTooManyRequests {
		if time.Now().After(deadline) {
			t.Fatal("the first stream never held the caller's one place")
		}
		time.Sleep(10 * time.Millisecond)
	}
	owner := strings.Repeat("o", lock.MaxOwnerLen)
	name := "flood:" + strings.Repeat("n", 150)
	ctx := context.Background()
	for deadline := time.Now().Add(30 * time.Second); ; {
		for range 500 {
			g, err := e.Mem.TryAcquire(ctx, lock.AcquireRequest{Lock: name, Owner: owner, TTL: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := e.Mem.Release(ctx, lock.LeaseRef{Lock: name, ID: g.Lease.ID}, true); err != nil {
				t.Fatal(err)
			}
		}
		if second() == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a stream that is never read still holds its place after 30 s of events")
		}
	}
	wantClosed(t, conn, start, 40*time.Second)
}
