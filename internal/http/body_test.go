package http_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	lockhttp "github.com/lockapi/lockapi/internal/http"
)

// bodyRoutes is every route of the API, with a path that reaches it, and
// routes that are not the API's: each must bound the time its client has
// to send a body.
var bodyRoutes = []struct{ method, path string }{
	{"POST", "/v1/locks/slow/leases"},
	{"POST", "/v1/locks/slow/leases/01HZZZZZZZZZZZZZZZZZZZZZZZ/renew"},
	{"DELETE", "/v1/locks/slow/leases/01HZZZZZZZZZZZZZZZZZZZZZZZ"},
	{"POST", "/v1/locks/slow/leases/01HZZZZZZZZZZZZZZZZZZZZZZZ/release?exp=1&sig=x"},
	{"GET", "/v1/locks/slow"},
	{"DELETE", "/v1/locks/slow"},
	{"GET", "/v1/locks"},
	{"POST", "/v1/leases"},
	{"DELETE", "/v1/leases"},
	{"POST", "/v1/sessions"},
	{"GET", "/v1/sessions"},
	{"GET", "/v1/sessions/01HZZZZZZZZZZZZZZZZZZZZZZZ"},
	{"POST", "/v1/sessions/01HZZZZZZZZZZZZZZZZZZZZZZZ/renew"},
	{"DELETE", "/v1/sessions/01HZZZZZZZZZZZZZZZZZZZZZZZ"},
	{"GET", "/v1/events"},
	{"POST", "/v1/webhooks"},
	{"GET", "/v1/webhooks"},
	{"GET", "/v1/webhooks/wh_x"},
	{"DELETE", "/v1/webhooks/wh_x"},
	{"POST", "/v1/webhooks/wh_x/ping"},
	{"GET", "/v1/webhooks/wh_x/dead-letters"},
	{"POST", "/v1/webhooks/wh_x/dead-letters/x/replay"},
	{"GET", "/healthz"},
	{"POST", "/healthz"},
	{"GET", "/readyz"},
	{"GET", "/openapi.yaml"},
	{"GET", "/openapi.json"},
	{"POST", "/nowhere"},
}

// A client that announces a body and then sends it too slowly, or not at
// all, is answered and its connection closed once the server's body
// timeout has passed, on every route: net/http neither waits for the body
// nor drains it without a deadline.
func TestSlowBody_everyRoute(t *testing.T) {
	const timeout = 500 * time.Millisecond
	e := MustOpenEnv(t, lockhttp.Config{BodyTimeout: timeout})
	addr := strings.TrimPrefix(e.URL, "http://")
	for _, trickle := range []bool{false, true} {
		for _, rt := range bodyRoutes {
			name := "Silent"
			if trickle {
				name = "Trickling"
			}
			t.Run(name+"/"+rt.method+"_"+rt.path, func(t *testing.T) {
				t.Parallel()
				conn, err := net.Dial("tcp", addr)
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Close()
				head := rt.method + " " + rt.path + " HTTP/1.1\r\nHost: lockapi\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"
				if _, err := io.WriteString(conn, head); err != nil {
					t.Fatal(err)
				}
				stop := make(chan struct{})
				defer close(stop)
				if trickle {
					go trickleBytes(conn, stop)
				}
				// Far beyond the body timeout, yet bounded: before the fix
				// the server kept these connections for good.
				_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
				br := bufio.NewReader(conn)
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					t.Fatalf("no answer: %v", err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if _, err := br.ReadByte(); !errors.Is(err, io.EOF) && !isReset(err) {
					t.Fatalf("after a %d, the connection was not closed: %v", resp.StatusCode, err)
				}
				if rt.method == "POST" && strings.HasPrefix(rt.path, "/v1/locks/slow/leases") && !strings.Contains(rt.path, "release") && resp.StatusCode != http.StatusBadRequest {
					t.Fatalf("status %d, want 400 for a body not sent in time", resp.StatusCode)
				}
			})
		}
	}
}

// trickleBytes writes a space every 100 ms until stop is closed or the
// connection fails: a body that keeps coming, never complete.
func trickleBytes(conn net.Conn, stop <-chan struct{}) {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
			if _, err := conn.Write([]byte(" ")); err != nil {
				return
			}
		}
	}
}

// isReset reports whether err is the server closing the connection with
// data of ours unread, which a trickling client may see as a reset.
func isReset(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && !op.Timeout()
}

// A body sent in full clears the body deadline: a long poll that waits past
// it is answered by its wait, not cut off, and the connection is kept.
func TestSlowBody_waitOutlivesTheBodyTimeout(t *testing.T) {
	const timeout = 200 * time.Millisecond
	e := MustOpenEnv(t, lockhttp.Config{BodyTimeout: timeout})
	e.Acquire("held", `{"owner":"a","ttl_ms":60000}`)
	start := time.Now()
	resp := e.Do("POST", "/v1/locks/held/leases", `{"owner":"b","wait_ms":1000}`)
	WantProblem(t, resp, http.StatusConflict, "lock-held")
	if waited := time.Since(start); waited < 1000*time.Millisecond {
		t.Fatalf("answered after %v, before its wait ended", waited)
	}
	if resp := e.Do("GET", "/healthz", ""); resp.StatusCode != http.StatusOK {
		t.Fatalf("healthz after the wait: %d", resp.StatusCode)
	}
}
