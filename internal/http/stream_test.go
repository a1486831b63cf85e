package http_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/lockapi/lockapi"
	"github.com/lockapi/lockapi/event"
	"github.com/lockapi/lockapi/internal/auth"
	lockhttp "github.com/lockapi/lockapi/internal/http"
	"github.com/lockapi/lockapi/internal/lock"
	"github.com/lockapi/lockapi/internal/store/memory"
)

// Stream is an open GET /v1/events, read frame by frame.
type Stream struct {
	t      testing.TB
	Header http.Header
	frames chan Frame
	cancel context.CancelFunc
	done   chan struct{} // closed when the body ended
}

// Frame is one Server-Sent Event, or a comment.
type Frame struct {
	ID, Event, Data string
	Comment         string // a comment line's text; the other fields empty
	Lines           []string
}

// OpenEvents starts GET /v1/events?query with optional header pairs and
// fails the test unless it is answered 200. It reads with a plain client:
// apitest's reads whole bodies, and a stream does not end.
func (e *Env) OpenEvents(query string, header ...string) *Stream {
	e.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.URL+"/v1/events?"+query, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		e.t.Fatalf("GET /v1/events?%s: %v", query, err)
	}
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		cancel()
		e.t.Fatalf("GET /v1/events?%s: %d %s", query, resp.StatusCode, body)
	}
	s := &Stream{t: e.t, Header: resp.Header, frames: make(chan Frame, 1024), cancel: cancel, done: make(chan struct{})}
	go s.read(resp.Body)
	e.t.Cleanup(s.Close)
	return s
}

func (s *Stream) read(body io.ReadCloser) {
	defer close(s.done)
	defer close(s.frames)
	defer body.Close()
	sc := bufio.NewScanner(body)
	var f Frame
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			if len(f.Lines) > 0 {
				s.frames <- f
			}
			f = Frame{}
			continue
		}
		f.Lines = append(f.Lines, line)
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "":
			f.Comment = value
		case "id":
			f.ID = value
		case "event":
			f.Event = value
		case "data":
			f.Data = value
		}
	}
}

// Close disconnects.
func (s *Stream) Close() { s.cancel() }

// Next returns the next frame, comments included.
func (s *Stream) Next() Frame {
	s.t.Helper()
	select {
	case f, ok := <-s.frames:
		if !ok {
			s.t.Fatal("the stream ended")
		}
		return f
	case <-time.After(promptly):
		s.t.Fatalf("no frame after %v", promptly)
	}
	return Frame{}
}

// Event returns the next event, skipping comments, checked against the
// framing and the Event schema.
func (s *Stream) Event() event.Event {
	s.t.Helper()
	for {
		f := s.Next()
		if f.Comment != "" {
			continue
		}
		return checkFrame(s.t, f)
	}
}

// Events returns the next n events.
func (s *Stream) Events(n int) []event.Event {
	s.t.Helper()
	out := make([]event.Event, n)
	for i := range out {
		out[i] = s.Event()
	}
	return out
}

// Quiet fails the test if an event arrives within d.
func (s *Stream) Quiet(d time.Duration) {
	s.t.Helper()
	deadline := time.After(d)
	for {
		select {
		case f, ok := <-s.frames:
			if ok && f.Comment == "" {
				s.t.Fatalf("unexpected event %v", f.Lines)
			}
		case <-deadline:
			return
		}
	}
}

// Ended waits for the server to end the stream.
func (s *Stream) Ended() {
	s.t.Helper()
	select {
	case <-s.done:
	case <-time.After(promptly):
		s.t.Fatalf("the stream did not end within %v", promptly)
	}
}

var eventSchema = sync.OnceValues(func() (*openapi3.Schema, error) {
	doc, err := openapi3.NewLoader().LoadFromData(lockapi.OpenAPI)
	if err != nil {
		return nil, err
	}
	return doc.Components.Schemas["Event"].Value, nil
})

// checkFrame checks an event frame: id, event and data lines in that
// order, the data an Event of the schema whose id and type the frame's.
func checkFrame(tb testing.TB, f Frame) event.Event {
	tb.Helper()
	if len(f.Lines) != 3 || !strings.HasPrefix(f.Lines[0], "id: ") || !strings.HasPrefix(f.Lines[1], "event: ") || !strings.HasPrefix(f.Lines[2], "data: ") {
		tb.Fatalf("frame %q: want id, event and data lines", f.Lines)
	}
	schema, err := eventSchema()
	if err != nil {
		tb.Fatal(err)
	}
	var v any
	if err := json.Unmarshal([]byte(f.Data), &v); err != nil {
		tb.Fatalf("data %s: %v", f.Data, err)
	}
	if err := schema.VisitJSON(v); err != nil {
		tb.Errorf("data %s does not match the Event schema: %v", f.Data, err)
	}
	var ev event.Event
	if err := json.Unmarshal([]byte(f.Data), &ev); err != nil {
		tb.Fatalf("data %s: %v", f.Data, err)
	}
	// Written again, it is the same bytes: no member unknown to event.Event,
	// and the time in event.TimeFormat.
	if again, err := event.Marshal(ev); err != nil || string(again) != f.Data {
		tb.Errorf("data %s, written again %s (%v)", f.Data, again, err)
	}
	if ev.ID != f.ID || string(ev.Type) != f.Event {
		tb.Errorf("frame id %q event %q, data id %q type %q", f.ID, f.Event, ev.ID, ev.Type)
	}
	return ev
}

func types(evs []event.Event) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = string(e.Type) + " " + e.Lock
	}
	return out
}

func eventIDs(evs []event.Event) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.ID
	}
	return out
}

// logIDs returns the ids of every event the store's log keeps.
func (e *Env) logIDs() []string {
	e.t.Helper()
	var out []string
	for after := ""; ; {
		page, err := e.Mem.ReadEvents(context.Background(), after, 1000)
		if err != nil {
			e.t.Fatal(err)
		}
		if len(page) == 0 {
			return out
		}
		for _, ev := range page {
			out = append(out, ev.ID)
		}
		after = page[len(page)-1].ID
	}
}

func (e *Env) release(l lockhttp.Lease, query string) {
	e.t.Helper()
	if resp := e.Do("DELETE", "/v1/locks/"+l.Lock+"/leases/"+l.LeaseID+query, ""); resp.StatusCode != http.StatusOK {
		e.t.Fatalf("release: %d %s", resp.StatusCode, resp.Body)
	}
}

func TestEvents_Stream(t *testing.T) {
	e := MustOpenEnv(t, lockhttp.Config{})
	e.Acquire("before", `{"owner":"o"}`) // not streamed: it happened before
	s := e.OpenEvents("")
	if ct := s.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Errorf("Content-Type = %q", ct)
	}
	if cc := s.Header.Get("Cache-Control"); cc != "no-store" {
		t.Errorf("Cache-Control = %q", cc)
	}
	if s.Header.Get("X-Request-ID") == "" {
		t.Error("no X-Request-ID")
	}

	start := time.Now().Add(-time.Second)
	l := e.Acquire("deploy:prod", `{"owner":"ci-7","ttl_ms":60000}`)
	e.Acquire("deploy:prod", `{"owner":"ci-7","ttl_ms":60000}`)
	if resp := e.Do("POST", "/v1/locks/deploy:prod/leases/"+l.LeaseID+"/renew", `{}`); resp.StatusCode != http.StatusOK {
		t.Fatalf("renew: %d %s", resp.StatusCode, resp.Body)
	}
	e.release(l, "")
	e.release(l, "")
	r1 := e.Acquire("reports", `{"owner":"r1","mode":"shared"}`)
	e.Acquire("reports", `{"owner":"r2","mode":"shared"}`)
	if resp := e.Do("DELETE", "/v1/locks/reports", ""); resp.StatusCode != http.StatusOK {
		t.Fatalf("force release: %d %s", resp.StatusCode, resp.Body)
	}

	got := s.Events(9)
	want := []string{
		"granted deploy:prod", "reentered deploy:prod", "renewed deploy:prod", "released deploy:prod", "released deploy:prod",
		"granted reports", "granted reports", "force_released reports", "force_released reports",
	}
	if !slices.Equal(types(got), want) {
		t.Fatalf("events %q, want %q", types(got), want)
	}
	for i, ev := range got[:5] {
		if ev.Owner != "ci-7" || ev.Mode != event.Exclusive || ev.FencingToken != l.FencingToken || ev.LeaseID != l.LeaseID {
			t.Errorf("event %d: %+v, want owner ci-7, exclusive, token %d, lease %s", i, ev, l.FencingToken, l.LeaseID)
		}
		if at := ev.Time; at.Before(start.Truncate(time.Millisecond)) || at.After(time.Now().Add(time.Second)) {
			t.Errorf("event %d: time %v", i, ev.Time)
		}
	}
	if holds := []int{got[0].HoldCount, got[1].HoldCount, got[2].HoldCount, got[3].HoldCount, got[4].HoldCount}; !slices.Equal(holds, []int{1, 2, 2, 1, 0}) {
		t.Errorf("hold counts %v, want [1 2 2 1 0]", holds)
	}
	if got[5].Mode != event.Shared || got[5].Owner != "r1" || got[5].LeaseID != r1.LeaseID {
		t.Errorf("shared grant: %+v", got[5])
	}
	for i := 1; i < len(got); i++ {
		if lock.CompareEventIDs(got[i-1].ID, got[i].ID) >= 0 {
			t.Errorf("ids %s, %s do not rise", got[i-1].ID, got[i].ID)
		}
	}
	if ids := e.logIDs(); !slices.Equal(eventIDs(got), ids[1:]) {
		t.Errorf("streamed %v, the log has %v after the first", eventIDs(got), ids)
	}
	s.Quiet(50 * time.Millisecond)
}

func TestEvents_Filters(t *testing.T) {
	e := MustOpenEnv(t, lockhttp.Config{})
	byLock := e.OpenEvents("lock=deploy:prod")
	byPrefix := e.OpenEvents("prefix=deploy:")
	byTypes := e.OpenEvents("types=released,force_released")
	both := e.OpenEvents("prefix=deploy:&types=granted")

	for _, name := range []string{"deploy:prod", "deploy:staging", "db", "deploy:prod"} {
		l := e.Acquire(name, `{"owner":"o"}`)
		e.release(l, "")
	}
	if got, want := types(byLock.Events(4)), []string{"granted deploy:prod", "released deploy:prod", "granted deploy:prod", "released deploy:prod"}; !slices.Equal(got, want) {
		t.Errorf("lock: %q, want %q", got, want)
	}
	if got, want := types(byPrefix.Events(6)), []string{"granted deploy:prod", "released deploy:prod", "granted deploy:staging", "released deploy:staging", "granted deploy:prod", "released deploy:prod"}; !slices.Equal(got, want) {
		t.Errorf("prefix: %q, want %q", got, want)
	}
	if got, want := types(byTypes.Events(4)), []string{"released deploy:prod", "released deploy:staging", "released db", "released deploy:prod"}; !slices.Equal(got, want) {
		t.Errorf("types: %q, want %q", got, want)
	}
	if got, want := types(both.Events(3)), []string{"granted deploy:prod", "granted deploy:staging", "granted deploy:prod"}; !slices.Equal(got, want) {
		t.Errorf("prefix and types: %q, want %q", got, want)
	}
	for _, s := range []*Stream{byLock, byPrefix, byTypes, both} {
		s.Quiet(20 * time.Millisecond)
	}
}

// A key's name patterns filter the stream; lease ids go to admins only.
func TestEvents_Keys(t *testing.T) {
	newKey := func(principal string, scopes []auth.Scope, patterns ...string) (string, string) {
		key, line, err := auth.NewKey(principal, scopes, patterns)
		if err != nil {
			t.Fatal(err)
		}
		return key, line
	}
	ciKey, ciLine := newKey("ci", []auth.Scope{auth.ScopeRead, auth.ScopeWrite}, "ci:*")
	writeKey, writeLine := newKey("writer", []auth.Scope{auth.ScopeWrite}, "*")
	adminKey, adminLine := newKey("ops", []auth.Scope{auth.ScopeAdmin}, "*")
	keys, err := auth.ParseKeys(strings.Join([]string{ciLine, writeLine, adminLine}, "\n"))
	if err != nil {
		t.Fatal(err)
	}
	e := MustOpenEnv(t, lockhttp.Config{Keys: keys})
	as := func(key string) []string { return []string{"Authorization", "Bearer " + key} }

	ci := e.OpenEvents("", as(ciKey)...)
	admin := e.OpenEvents("", as(adminKey)...)
	var leases []lockhttp.Lease
	for _, name := range []string{"ci:build", "prod:db", "ci:test"} {
		resp := e.Do("POST", "/v1/locks/"+name+"/leases", `{"owner":"o"}`, as(adminKey)...)
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("acquire %s: %d %s", name, resp.StatusCode, resp.Body)
		}
		leases = append(leases, Decode[lockhttp.Lease](t, resp))
	}

	got := ci.Events(2)
	if want := []string{"granted ci:build", "granted ci:test"}; !slices.Equal(types(got), want) {
		t.Errorf("ci key: %q, want %q", types(got), want)
	}
	for _, ev := range got {
		if ev.LeaseID != "" {
			t.Errorf("ci key sees lease id %q", ev.LeaseID)
		}
		if ev.Principal != "ops" {
			t.Errorf("principal %q, want ops", ev.Principal)
		}
	}
	ci.Quiet(20 * time.Millisecond)
	got = admin.Events(3)
	for i, ev := range got {
		if ev.Lock != leases[i].Lock || ev.LeaseID != leases[i].LeaseID {
			t.Errorf("admin: event %d of %s lease %q, want %s %s", i, ev.Lock, ev.LeaseID, leases[i].Lock, leases[i].LeaseID)
		}
	}

	e = e.For(t)
	WantProblem(t, e.Do("GET", "/v1/events", ""), http.StatusUnauthorized, "unauthorized")
	WantProblem(t, e.Do("GET", "/v1/events", "", as(writeKey)...), http.StatusForbidden, "forbidden")
	WantProblem(t, e.Do("GET", "/v1/events?lock=prod:db", "", as(ciKey)...), http.StatusForbidden, "forbidden")
}

func TestEvents_BadRequest(t *testing.T) {
	e := MustOpenEnv(t, lockhttp.Config{})
	for _, c := range []struct {
		query  string
		header []string
		field  string
	}{
		{"types=granted,nope", nil, "types"},
		{"types=", nil, "types"},
		{"after=42", nil, "after"},
		{"after=00", nil, "after"},
		{"after=a-b", nil, "after"},
		{"", []string{"Last-Event-ID", "yesterday"}, "Last-Event-ID"},
		{"after=1-0", []string{"Last-Event-ID", "1"}, "Last-Event-ID"},
		// Both resume points are checked, though Last-Event-ID wins.
		{"after=yesterday", []string{"Last-Event-ID", "1-0"}, "after"},
		{"after=", nil, "after"},
		{"", []string{"Last-Event-ID", "1-0", "Last-Event-ID", "2-0"}, "Last-Event-ID"},
		// An id's parts are at most 19 digits: leading zeros do not make
		// an id longer, nor does a value past 64 bits.
		{"after=" + strings.Repeat("0", 20) + "1-0", nil, "after"},
		{"after=1-" + strings.Repeat("9", 20), nil, "after"},
		{"", []string{"Last-Event-ID", strings.Repeat("0", 1000) + "-0"}, "Last-Event-ID"},
		{"lock=a&prefix=a", nil, "prefix"},
		{"lock=bad%20name", nil, "lock"},
		{"lock=", nil, "lock"},
		{"prefix=a%2Fb", nil, "prefix"},
		{"lock=a&lock=b", nil, "lock"},
	} {
		t.Run(c.query+strings.Join(c.header, ":"), func(t *testing.T) {
			e := e.Malformed(t)
			p := WantProblem(t, e.Do("GET", "/v1/events?"+c.query, "", c.header...), http.StatusBadRequest, "invalid-request")
			if len(p.Errors) != 1 || p.Errors[0].Field != c.field {
				t.Errorf("errors %+v, want one for %s", p.Errors, c.field)
			}
		})
	}
}

func TestEvents_Gone(t *testing.T) {
	e := MustOpenEnv(t, lockhttp.Config{})
	e.Hooks.OnReadEvents = func(ctx context.Context, after string, limit int) ([]lock.Event, error) {
		return nil, lock.EventsGone(after, "1795460000000-7")
	}
	p := WantProblem(t, e.Do("GET", "/v1/events?after=1795400000000-0", ""), http.StatusGone, "events-gone")
	if !strings.Contains(p.Detail, "1795400000000-0") || p.OldestID != "1795460000000-7" {
		t.Errorf("detail %q, oldest_id %q", p.Detail, p.OldestID)
	}
	p = WantProblem(t, e.Do("GET", "/v1/events", "", "Last-Event-ID", "1795400000000-0"), http.StatusGone, "events-gone")
	if p.OldestID != "1795460000000-7" {
		t.Errorf("oldest_id %q", p.OldestID)
	}
}

// after=0, or Last-Event-ID: 0, starts with the oldest event the log
// keeps: nothing is older, so it is never gone, however much the log
// trimmed, while 0-0 is an id like any other.
func TestEvents_FromStart(t *testing.T) {
	e := MustOpenEnv(t, lockhttp.Config{})
	e.Acquire("a", `{"owner":"o"}`)
	e.Acquire("b", `{"owner":"o"}`)
	logged := e.logIDs()
	e.Hooks.OnReadEvents = func(ctx context.Context, after string, limit int) ([]lock.Event, error) {
		if after != "" {
			return nil, lock.EventsGone(after, logged[0])
		}
		return e.Mem.ReadEvents(ctx, after, limit)
	}
	for _, header := range [][]string{nil, {"Last-Event-ID", "0"}} {
		query := "after=0"
		if header != nil {
			query = ""
		}
		s := e.OpenEvents(query, header...)
		if got := eventIDs(s.Events(2)); !slices.Equal(got, logged) {
			t.Errorf("%s %v: streamed %v, want the whole log %v", query, header, got, logged)
		}
		s.Close()
	}
	WantProblem(t, e.Do("GET", "/v1/events?after=0-0", ""), http.StatusGone, "events-gone")
}

// noEventLog is a store that keeps no event log.
type noEventLog struct{ lock.Store }

func (noEventLog) Events() lock.EventLog { return nil }

func TestEvents_Disabled(t *testing.T) {
	for name, st := range map[string]lock.Store{
		"NoEventLog": noEventLog{memory.New()},
		"EventsOff":  memory.NewWithOptions(memory.Options{NoEvents: true}),
	} {
		t.Run(name, func(t *testing.T) {
			t.Cleanup(func() { _ = st.Close() })
			srv := lockhttp.NewServer(st, withRelease(lockhttp.Config{}))
			if err := srv.Open("127.0.0.1:0"); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = srv.Close(context.Background()) })
			e := (&Env{URL: srv.URL(), validateRequests: true}).For(t)
			WantProblem(t, e.Do("GET", "/v1/events", ""), http.StatusNotImplemented, "events-disabled")
		})
	}
}

// A client that reconnects with the last id it got, while locks keep
// changing, misses nothing and gets nothing twice.
func TestEvents_Resume(t *testing.T) {
	e := MustOpenEnv(t, lockhttp.Config{})
	e.Acquire("a", `{"owner":"o"}`)
	ctx, stop := context.WithCancel(context.Background())
	writerDone := make(chan struct{})
	// Stopped and drained before the server closes, on a failure too: a
	// request cut short by the test's own shutdown is not the server's
	// failure, and must not be reported as one.
	defer func() { stop(); <-writerDone }()
	go func() {
		defer close(writerDone)
		for i := 0; ctx.Err() == nil; i++ {
			name := fmt.Sprint("w", i%5)
			resp, err := e.send(context.Background(), "POST", "/v1/locks/"+name+"/leases", `{"owner":"w"}`)
			if err != nil || resp.StatusCode != http.StatusCreated {
				t.Errorf("acquire %s: %v %d %s", name, err, resp.StatusCode, resp.Body)
				return
			}
			l := Decode[lockhttp.Lease](t, resp)
			if _, err := e.send(context.Background(), "DELETE", "/v1/locks/"+name+"/leases/"+l.LeaseID, ""); err != nil {
				t.Errorf("release: %v", err)
				return
			}
		}
	}()

	// The first connection resumes after the first event with after=, the
	// next ones with Last-Event-ID, which wins over after.
	ids := e.logIDs()[:1]
	var got []event.Event
	for i := range 6 {
		header := []string{"Last-Event-ID", ids[len(ids)-1]}
		if i == 0 {
			header = nil
		}
		s := e.OpenEvents("after="+ids[0], header...)
		got = append(got, s.Events(20+i*7)...)
		s.Close()
		ids = append(ids, got[len(got)-1].ID)
	}
	stop()
	<-writerDone

	log := e.logIDs()
	want := log[1:min(1+len(got), len(log))]
	if !slices.Equal(eventIDs(got), want) {
		t.Errorf("got %d events over 6 connections, not the log's run after %s; first difference at %d", len(got), log[0], firstDifference(eventIDs(got), want))
	}
}

func firstDifference(a, b []string) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

func TestEvents_Heartbeat(t *testing.T) {
	key, line, err := auth.NewKey("watcher", []auth.Scope{auth.ScopeRead}, []string{"quiet:*"})
	if err != nil {
		t.Fatal(err)
	}
	keys, err := auth.ParseKeys(line)
	if err != nil {
		t.Fatal(err)
	}
	e := MustOpenEnv(t, lockhttp.Config{Keys: keys, EventsHeartbeat: 20 * time.Millisecond})
	s := e.OpenEvents("", "Authorization", "Bearer "+key)
	// Events the key may not read, many a millisecond, do not hold the
	// keep-alive up.
	stop, stopped := make(chan struct{}), make(chan struct{})
	defer func() {
		close(stop)
		<-stopped
	}()
	go func() {
		defer close(stopped)
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Microsecond):
			}
			if _, err := e.Mem.TryAcquire(context.Background(), lock.AcquireRequest{Lock: "busy", Owner: "o", TTL: time.Minute}); err != nil {
				t.Errorf("acquire: %v", err)
				return
			}
		}
	}()
	for range 3 {
		if f := s.Next(); f.Comment != "keep-alive" || len(f.Lines) != 1 {
			t.Fatalf("frame %q, want a keep-alive comment", f.Lines)
		}
	}
}

// Closing the server ends the streams at once.
func TestEvents_ServerClose(t *testing.T) {
	mem := memory.New()
	t.Cleanup(func() { _ = mem.Close() })
	e := mustOpenEnvOn(t, mem, &HookStore{Store: mem}, lockhttp.Config{})
	s := e.OpenEvents("")
	e.Acquire("a", "")
	s.Event()
	ctx, cancel := context.WithTimeout(context.Background(), promptly)
	defer cancel()
	closed := make(chan error, 1)
	go func() { closed <- e.Server.Close(ctx) }()
	s.Ended()
	if err := <-closed; err != nil && !errors.Is(err, context.Canceled) {
		t.Errorf("close: %v", err)
	}
}
