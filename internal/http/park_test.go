package http_test

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	lockhttp "github.com/lockapi/lockapi/internal/http"
	"github.com/lockapi/lockapi/internal/metrics"
)

// rawConn is one HTTP/1.1 connection to e's server, spoken by hand, so a
// test sees which connection its answers come on.
type rawConn struct {
	t    *testing.T
	conn net.Conn
	r    *bufio.Reader
}

func dialRaw(t *testing.T, e *Env) *rawConn {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(e.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(4 * promptly))
	return &rawConn{t: t, conn: conn, r: bufio.NewReader(conn)}
}

// request is an HTTP/1.1 request with a JSON body ("" for none).
func request(method, path, body string, header ...string) string {
	var b strings.Builder
	b.WriteString(method + " " + path + " HTTP/1.1\r\nHost: lockapi\r\n")
	for i := 0; i+1 < len(header); i += 2 {
		b.WriteString(header[i] + ": " + header[i+1] + "\r\n")
	}
	if body != "" {
		b.WriteString("Content-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n")
	}
	b.WriteString("\r\n" + body)
	return b.String()
}

func (c *rawConn) send(reqs ...string) {
	c.t.Helper()
	if _, err := io.WriteString(c.conn, strings.Join(reqs, "")); err != nil {
		c.t.Fatal(err)
	}
}

// read reads the next response on the connection, and its body.
func (c *rawConn) read() Response {
	c.t.Helper()
	resp, err := http.ReadResponse(c.r, nil)
	if err != nil {
		c.t.Fatalf("read response: %v", err)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatal(err)
	}
	return Response{Response: resp, Body: body}
}

// waitParked waits until n requests are parked off net/http.
func waitParked(t *testing.T, e *Env, n int) {
	t.Helper()
	for deadline := time.Now().Add(promptly); e.Server.ParkedLen() != n; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d requests parked, want %d", e.Server.ParkedLen(), n)
		}
	}
}

// accessLine is the access-log line of the request with id.
func accessLine(t *testing.T, e *Env, id string) map[string]any {
	t.Helper()
	var found []map[string]any
	for _, line := range e.Logs.Lines(t) {
		if line["message"] == "request" && line["request_id"] == id {
			found = append(found, line)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d access-log lines for request %s, want 1: %v", len(found), id, found)
	}
	return found[0]
}

func TestPark(t *testing.T) {
	const wait = `{"owner":"b","wait_ms":60000}`

	t.Run("GrantedThenSameConnectionServesNext", func(t *testing.T) {
		e := MustOpenHookedEnv(t, lockhttp.Config{Metrics: metrics.New()})
		holder := e.Acquire("q", `{"owner":"a","ttl_ms":600000}`)
		c := dialRaw(t, e)
		c.send(request("POST", "/v1/locks/q/leases", wait, "X-Request-ID", "parked-1"))
		waitParked(t, e, 1)
		e.Do("DELETE", "/v1/locks/q/leases/"+holder.LeaseID, "")

		resp := c.read()
		if resp.StatusCode != http.StatusCreated || resp.Close {
			t.Fatalf("status %d, close %v: %s", resp.StatusCode, resp.Close, resp.Body)
		}
		// Answered, the request is parked no longer, although its
		// connection waits for the next.
		waitParked(t, e, 0)
		l := Decode[lockhttp.Lease](t, resp)
		if l.Owner != "b" || l.FencingToken <= holder.FencingToken {
			t.Errorf("lease = %+v", l)
		}
		h := resp.Header
		if h.Get("Location") != "/v1/locks/q/leases/"+l.LeaseID || h.Get("X-Request-ID") != "parked-1" ||
			h.Get("Content-Type") != "application/json" || h.Get("Date") == "" || resp.ContentLength != int64(len(resp.Body)) {
			t.Errorf("header = %v", h)
		}
		line := accessLine(t, e, "parked-1")
		if line["method"] != "POST" || line["route"] != "/v1/locks/{name}/leases" || line["status"] != float64(201) ||
			line["bytes"] != float64(len(resp.Body)) || line["remote"] == "" {
			t.Errorf("access-log line = %v", line)
		}
		got := scrapeMetrics(t, e)
		if n := got[`lockapi_wait_duration_seconds_count{outcome="granted"}`]; n != 1 {
			t.Errorf("granted waits counted = %v", n)
		}
		// The holder's acquire and the parked one.
		if n := got[`lockapi_http_requests_total{method="POST",route="/v1/locks/{name}/leases",status="201"}`]; n != 2 {
			t.Errorf("requests counted = %v", n)
		}

		// The connection goes back to the server for the next request.
		c.send(request("GET", "/v1/locks/q", ""))
		if resp := c.read(); resp.StatusCode != http.StatusOK || Decode[lockhttp.LockState](t, resp).Holder.Owner != "b" {
			t.Fatalf("next request on the connection: %d %s", resp.StatusCode, resp.Body)
		}
		waitParked(t, e, 0)
	})

	t.Run("PipelinedRequestAnsweredAfter", func(t *testing.T) {
		e := MustOpenHookedEnv(t, lockhttp.Config{})
		holder := e.Acquire("q", `{"owner":"a","ttl_ms":600000}`)
		c := dialRaw(t, e)
		c.send(request("POST", "/v1/locks/q/leases", wait), request("GET", "/healthz", ""))
		waitParked(t, e, 1)
		e.Do("DELETE", "/v1/locks/q/leases/"+holder.LeaseID, "")
		if resp := c.read(); resp.StatusCode != http.StatusCreated {
			t.Fatalf("first answer %d: %s", resp.StatusCode, resp.Body)
		}
		if resp := c.read(); resp.StatusCode != http.StatusOK || !strings.Contains(string(resp.Body), `"ok"`) {
			t.Fatalf("pipelined answer %d: %s", resp.StatusCode, resp.Body)
		}
	})

	t.Run("WaitRunsOut409OnSameConnection", func(t *testing.T) {
		e := MustOpenEnv(t, lockhttp.Config{})
		e.Acquire("q", `{"owner":"a","ttl_ms":600000}`)
		c := dialRaw(t, e)
		c.send(request("POST", "/v1/locks/q/leases", `{"owner":"b","wait_ms":300}`))
		resp := c.read()
		p := WantProblem(t, resp, http.StatusConflict, "lock-held")
		if resp.Header.Get("Retry-After") == "" || p.Holder == nil || p.Holder.Owner != "a" {
			t.Errorf("Retry-After %q, problem %+v", resp.Header.Get("Retry-After"), p)
		}
		c.send(request("GET", "/healthz", ""))
		if resp := c.read(); resp.StatusCode != http.StatusOK {
			t.Fatalf("next request on the connection: %d", resp.StatusCode)
		}
	})

	t.Run("ClientLeavesHoldsNothing", func(t *testing.T) {
		e := MustOpenHookedEnv(t, lockhttp.Config{Metrics: metrics.New()})
		holder := e.Acquire("q", `{"owner":"a","ttl_ms":600000}`)
		c := dialRaw(t, e)
		c.send(request("POST", "/v1/locks/q/leases", `{"owner":"departed","wait_ms":60000}`, "X-Request-ID", "departed"))
		waitParked(t, e, 1)
		// Drain the first watch's announcement: the parked wait's own
		// closing is what this test waits for.
		Within(t, e.Hooks.Watching, "waiter registered")
		c.conn.Close()

		Within(t, e.Hooks.Unwatched, "server stopped waiting")
		waitParked(t, e, 0)
		if line := accessLine(t, e, "departed"); line["status"] != float64(lockhttp.StatusClientClosedRequest) {
			t.Errorf("access-log line = %v", line)
		}
		got := scrapeMetrics(t, e)
		if got["lockapi_waiters"] != 0 || got[`lockapi_wait_duration_seconds_count{outcome="cancelled"}`] != 1 {
			t.Errorf("waiters %v, cancelled waits %v", got["lockapi_waiters"], got[`lockapi_wait_duration_seconds_count{outcome="cancelled"}`])
		}
		e.Do("DELETE", "/v1/locks/q/leases/"+holder.LeaseID, "")
		if st := e.State("q"); st.Held {
			t.Fatalf("lock held by %q after the holder released and the waiter left", st.Holder.Owner)
		}
		if l := e.Acquire("q", `{"owner":"c"}`); l.Owner != "c" {
			t.Fatalf("lease = %+v", l)
		}
	})

	t.Run("Close503", func(t *testing.T) {
		e := MustOpenHookedEnv(t, lockhttp.Config{})
		e.Acquire("q", `{"owner":"a","ttl_ms":600000}`)
		c := dialRaw(t, e)
		c.send(request("POST", "/v1/locks/q/leases", wait))
		waitParked(t, e, 1)

		closed := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), promptly)
			defer cancel()
			closed <- e.Server.Close(ctx)
		}()
		resp := c.read()
		p := WantProblem(t, resp, http.StatusServiceUnavailable, "unavailable")
		if p.Detail != "server is shutting down" || resp.Header.Get("Retry-After") != "1" || !resp.Close {
			t.Errorf("detail %q, Retry-After %q, close %v", p.Detail, resp.Header.Get("Retry-After"), resp.Close)
		}
		if err := Within(t, closed, "Close returned"); err != nil {
			t.Fatalf("close: %v", err)
		}
		if _, err := c.r.ReadByte(); err != io.EOF {
			t.Errorf("after the 503 the connection reads %v, want EOF", err)
		}
		if st := e.State("q"); st.Holder.Owner != "a" {
			t.Errorf("holder = %q after shutdown", st.Holder.Owner)
		}
	})

	t.Run("CloseEndsAnIdleHandedBackConnection", func(t *testing.T) {
		e := MustOpenHookedEnv(t, lockhttp.Config{})
		holder := e.Acquire("q", `{"owner":"a","ttl_ms":600000}`)
		c := dialRaw(t, e)
		c.send(request("POST", "/v1/locks/q/leases", wait))
		waitParked(t, e, 1)
		e.Do("DELETE", "/v1/locks/q/leases/"+holder.LeaseID, "")
		if resp := c.read(); resp.StatusCode != http.StatusCreated {
			t.Fatalf("status %d: %s", resp.StatusCode, resp.Body)
		}
		// The connection now waits for its next request, which never
		// comes: Close must not wait for it.
		ctx, cancel := context.WithTimeout(context.Background(), promptly)
		defer cancel()
		if err := e.Server.Close(ctx); err != nil {
			t.Fatalf("close: %v", err)
		}
		if _, err := c.r.ReadByte(); err != io.EOF {
			t.Errorf("after Close the connection reads %v, want EOF", err)
		}
	})

	t.Run("ConnectionCloseWaitsInNetHTTP", func(t *testing.T) {
		e := MustOpenHookedEnv(t, lockhttp.Config{})
		holder := e.Acquire("q", `{"owner":"a","ttl_ms":600000}`)
		c := dialRaw(t, e)
		c.send(request("POST", "/v1/locks/q/leases", wait, "Connection", "close"))
		Within(t, e.Hooks.Watching, "waiter registered")
		if n := e.Server.ParkedLen(); n != 0 {
			t.Errorf("%d parked: a request that closes its connection has none to hand back", n)
		}
		e.Do("DELETE", "/v1/locks/q/leases/"+holder.LeaseID, "")
		if resp := c.read(); resp.StatusCode != http.StatusCreated {
			t.Fatalf("status %d: %s", resp.StatusCode, resp.Body)
		}
	})
}

func TestParkMulti(t *testing.T) {
	const wait = `{"locks":["m:a","m:b"],"owner":"b","wait_ms":60000}`

	t.Run("GrantedThenSameConnectionServesNext", func(t *testing.T) {
		e := MustOpenHookedEnv(t, lockhttp.Config{Metrics: metrics.New()})
		holder := e.Acquire("m:b", `{"owner":"a","ttl_ms":600000}`)
		c := dialRaw(t, e)
		c.send(request("POST", "/v1/leases", wait, "X-Request-ID", "parked-multi"))
		waitParked(t, e, 1)
		if st := e.State("m:a"); st.Held {
			t.Errorf("m:a held by %q while the multi-lock waits for m:b", st.Holder.Owner)
		}
		e.Do("DELETE", "/v1/locks/m:b/leases/"+holder.LeaseID, "")

		resp := c.read()
		if resp.StatusCode != http.StatusCreated || resp.Close {
			t.Fatalf("status %d, close %v: %s", resp.StatusCode, resp.Close, resp.Body)
		}
		leases := Decode[lockhttp.MultiLeases](t, resp).Leases
		if len(leases) != 2 || leases[0].Lock != "m:a" || leases[1].Lock != "m:b" ||
			leases[0].Owner != "b" || leases[1].Owner != "b" || leases[1].FencingToken <= holder.FencingToken {
			t.Errorf("leases = %+v", leases)
		}
		h := resp.Header
		if h.Get("X-Request-ID") != "parked-multi" || h.Get("Content-Type") != "application/json" ||
			h.Get("Date") == "" || resp.ContentLength != int64(len(resp.Body)) {
			t.Errorf("header = %v", h)
		}
		line := accessLine(t, e, "parked-multi")
		if line["method"] != "POST" || line["route"] != "/v1/leases" || line["status"] != float64(201) ||
			line["bytes"] != float64(len(resp.Body)) {
			t.Errorf("access-log line = %v", line)
		}
		got := scrapeMetrics(t, e)
		if n := got[`lockapi_wait_duration_seconds_count{outcome="granted"}`]; n != 1 {
			t.Errorf("granted waits counted = %v", n)
		}
		if n := got[`lockapi_http_requests_total{method="POST",route="/v1/leases",status="201"}`]; n != 1 {
			t.Errorf("requests counted = %v", n)
		}

		// The connection goes back to the server for the next request.
		c.send(request("GET", "/v1/locks/m:a", ""))
		if resp := c.read(); resp.StatusCode != http.StatusOK || Decode[lockhttp.LockState](t, resp).Holder.Owner != "b" {
			t.Fatalf("next request on the connection: %d %s", resp.StatusCode, resp.Body)
		}
		waitParked(t, e, 0)
	})

	t.Run("WaitRunsOut409OnSameConnection", func(t *testing.T) {
		e := MustOpenEnv(t, lockhttp.Config{})
		e.Acquire("m:b", `{"owner":"a","ttl_ms":600000}`)
		c := dialRaw(t, e)
		c.send(request("POST", "/v1/leases", `{"locks":["m:a","m:b"],"owner":"b","wait_ms":300}`))
		resp := c.read()
		if p := WantProblem(t, resp, http.StatusConflict, "lock-held"); p.Holder == nil || p.Holder.Owner != "a" {
			t.Errorf("problem %+v", p)
		}
		if st := e.State("m:a"); st.Held {
			t.Errorf("m:a held by %q after the multi-lock's wait ran out", st.Holder.Owner)
		}
		c.send(request("GET", "/healthz", ""))
		if resp := c.read(); resp.StatusCode != http.StatusOK {
			t.Fatalf("next request on the connection: %d", resp.StatusCode)
		}
	})

	t.Run("ClientLeavesHoldsNothing", func(t *testing.T) {
		e := MustOpenHookedEnv(t, lockhttp.Config{Metrics: metrics.New()})
		holder := e.Acquire("m:b", `{"owner":"a","ttl_ms":600000}`)
		c := dialRaw(t, e)
		c.send(request("POST", "/v1/leases", `{"locks":["m:a","m:b"],"owner":"departed","wait_ms":60000}`, "X-Request-ID", "departed-multi"))
		waitParked(t, e, 1)
		// Drain the watch's announcement: the parked wait's own closing
		// is what this test waits for.
		Within(t, e.Hooks.Watching, "waiter registered")
		c.conn.Close()

		Within(t, e.Hooks.Unwatched, "server stopped waiting")
		waitParked(t, e, 0)
		if line := accessLine(t, e, "departed-multi"); line["status"] != float64(lockhttp.StatusClientClosedRequest) {
			t.Errorf("access-log line = %v", line)
		}
		got := scrapeMetrics(t, e)
		if got["lockapi_waiters"] != 0 || got[`lockapi_wait_duration_seconds_count{outcome="cancelled"}`] != 1 {
			t.Errorf("waiters %v, cancelled waits %v", got["lockapi_waiters"], got[`lockapi_wait_duration_seconds_count{outcome="cancelled"}`])
		}
		e.Do("DELETE", "/v1/locks/m:b/leases/"+holder.LeaseID, "")
		for _, name := range []string{"m:a", "m:b"} {
			if st := e.State(name); st.Held {
				t.Fatalf("%s held by %q after the holder released and the waiter left", name, st.Holder.Owner)
			}
		}
	})

	t.Run("Close503", func(t *testing.T) {
		e := MustOpenHookedEnv(t, lockhttp.Config{})
		e.Acquire("m:b", `{"owner":"a","ttl_ms":600000}`)
		c := dialRaw(t, e)
		c.send(request("POST", "/v1/leases", wait))
		waitParked(t, e, 1)

		closed := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), promptly)
			defer cancel()
			closed <- e.Server.Close(ctx)
		}()
		resp := c.read()
		if p := WantProblem(t, resp, http.StatusServiceUnavailable, "unavailable"); p.Detail != "server is shutting down" || !resp.Close {
			t.Errorf("detail %q, close %v", p.Detail, resp.Close)
		}
		if err := Within(t, closed, "Close returned"); err != nil {
			t.Fatalf("close: %v", err)
		}
		if st := e.State("m:a"); st.Held {
			t.Errorf("m:a held by %q after shutdown", st.Holder.Owner)
		}
	})
}
