package http_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	lockhttp "github.com/lockapi/lockapi/internal/http"
	"github.com/lockapi/lockapi/internal/lock"
	"github.com/lockapi/lockapi/internal/store/memory"
)

// The fuzz targets drive the real handler, with all its middleware, on a
// fresh memory store per input. The locks in fuzzHeld are held by owner
// fuzzBusyOwner, so that reentrant acquires, conflicts, renewals and listing
// pages are reachable; "{L}" in a fuzzed lease id stands for busy's lease.
//
// The invariants: no input is a server error; every answer that is not a
// success is an application/problem+json whose status member is the HTTP
// status; a 4xx changes nothing in the store (a GET never does); and a
// success agrees with what the store then holds.

const (
	fuzzBusyOwner = "holder"
	// fuzzMaxWait keeps a fuzzed wait_ms (or a blocking query whose index
	// matches) from sleeping for the default minute.
	fuzzMaxWait = time.Millisecond
)

// fuzzHeld are the locks held in every fuzz store.
var fuzzHeld = []string{"busy", "busy:2", "zeta"}

type fuzzEnv struct {
	mem     *memory.Store
	handler http.Handler
	busy    lock.Lease
}

func newFuzzEnv(t *testing.T) *fuzzEnv {
	t.Helper()
	mem := memory.New()
	t.Cleanup(func() { _ = mem.Close() })
	e := &fuzzEnv{mem: mem, handler: lockhttp.NewServer(mem, withRelease(lockhttp.Config{MaxWait: fuzzMaxWait})).Handler()}
	for _, name := range fuzzHeld {
		g, err := mem.TryAcquire(context.Background(), lock.AcquireRequest{
			Lock: name, Owner: fuzzBusyOwner, TTL: time.Hour, Metadata: map[string]string{"k": "v"},
		})
		if err != nil {
			t.Fatal(err)
		}
		if name == "busy" {
			e.busy = g.Lease
		}
	}
	return e
}

// snapshot is every held lock's index, plus the indexes of names (held or
// not): any change the store makes changes one of them. Each lock's
// content, its leases and queue, is under "state": a wait that took a queue
// place and left it again changes the index, not the content, and so does a
// multi-lock that took a name and gave it back (the name's last token rose).
func (e *fuzzEnv) snapshot(t *testing.T, names ...string) map[string]string {
	t.Helper()
	ctx := context.Background()
	page, err := e.mem.List(ctx, lock.ListRequest{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	snap := map[string]string{}
	content := func(st lock.State) string {
		c := fmt.Sprint(st.Held, st.Kind, st.Limit, st.Queue)
		for _, h := range st.Holders {
			c += fmt.Sprint(" ", h.Owner, h.Mode, h.Token, h.HoldCount, h.ExpiresAt.UnixNano())
		}
		return c
	}
	for _, st := range page.Locks {
		snap["held "+st.Lock] = st.Index
		snap["state "+st.Lock] = content(st)
	}
	for _, name := range names {
		st, err := e.mem.Inspect(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		snap["inspect "+name] = st.Index
		snap["state "+name] = content(st)
	}
	return snap
}

// contentOf keeps the "state" entries of a snapshot.
func contentOf(snap map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range snap {
		if strings.HasPrefix(k, "state ") {
			out[k] = v
		}
	}
	return out
}

// serve sends one request to the handler. target is the raw request-URI; one
// that net/http would refuse to parse never reaches a handler, and is
// skipped (ok false).
func (e *fuzzEnv) serve(method, target, contentType string, body []byte) (rec *httptest.ResponseRecorder, ok bool) {
	u, err := url.ParseRequestURI(target)
	if err != nil {
		return nil, false
	}
	req := httptest.NewRequest(method, "/", bytes.NewReader(body))
	req.URL, req.RequestURI = u, target
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	rec = httptest.NewRecorder()
	e.handler.ServeHTTP(rec, req)
	return rec, true
}

// checkAnswer checks the invariants of one answer; before is the store's
// snapshot taken before the request and after the one taken after it.
func checkAnswer(t *testing.T, method, target string, rec *httptest.ResponseRecorder, before, after map[string]string) {
	t.Helper()
	code, ct, body := rec.Code, rec.Header().Get("Content-Type"), rec.Body.Bytes()
	if code >= 500 {
		t.Fatalf("%s %q: %d %s", method, target, code, body)
	}
	if rec.Header().Get("X-Request-ID") == "" {
		t.Errorf("%s %q: %d without X-Request-ID", method, target, code)
	}
	if code >= 200 && code < 300 {
		if ct != "application/json" || !json.Valid(body) {
			t.Fatalf("%s %q: %d %s with a body that is not JSON: %q", method, target, code, ct, body)
		}
	} else {
		var p struct {
			Type   string `json:"type"`
			Status int    `json:"status"`
		}
		if ct != "application/problem+json" {
			t.Fatalf("%s %q: %d with Content-Type %q, want application/problem+json; body %q", method, target, code, ct, body)
		}
		if err := json.Unmarshal(body, &p); err != nil || p.Status != code || !strings.HasPrefix(p.Type, lockhttp.ProblemTypeBase) {
			t.Fatalf("%s %q: %d with problem %q (%v), want status %d and a %s type", method, target, code, body, err, code, lockhttp.ProblemTypeBase)
		}
	}
	switch {
	case code == http.StatusConflict:
		// A refused wait may have taken a queue place and given it up.
		if !maps.Equal(contentOf(before), contentOf(after)) {
			t.Fatalf("%s %q: %d %s changed the store:\nbefore %v\nafter  %v", method, target, code, body, before, after)
		}
	case code >= 400 || method == http.MethodGet:
		if !maps.Equal(before, after) {
			t.Fatalf("%s %q: %d %s changed the store:\nbefore %v\nafter  %v", method, target, code, body, before, after)
		}
	}
}

const fuzzJSON = "application/json"

// FuzzAcquireBody fuzzes POST /v1/locks/{name}/leases: the name (a raw path
// segment), the Content-Type and the body.
func FuzzAcquireBody(f *testing.F) {
	for _, c := range []struct{ name, ct, body string }{
		{"fresh", fuzzJSON, `{"owner":"a","ttl_ms":1000,"wait_ms":0,"metadata":{"commit":"4f2a9c1"}}`},
		{"fresh", fuzzJSON, ``},
		{"fresh", "", `{}`},
		{"fresh", "text/plain", `{}`},
		{"fresh", "application/json; charset=utf-8", " \n{\"owner\":null}\t"},
		{"busy", fuzzJSON, `{"owner":"holder"}`},
		{"busy", fuzzJSON, `{"owner":"other","wait_ms":5}`},
		{"busy", fuzzJSON, `{"owner":"holder","metadata":{"k":"changed"},"ttl_ms":5}`},
		{"fresh", fuzzJSON, `{"ttl_ms":9}`},
		{"fresh", fuzzJSON, `{"ttl_ms":1e30,"wait_ms":-1}`},
		{"fresh", fuzzJSON, `{"TTL_MS":100}`},
		{"fresh", fuzzJSON, `{"owner":"a"}{"owner":"b"}`},
		{"fresh", fuzzJSON, `{"owner":"a\u0000"}`},
		{"fresh", fuzzJSON, "{\"owner\":\"\xff\"}"},
		{"fresh", fuzzJSON, `{"metadata":{"":"v"}}`},
		{"fresh", fuzzJSON, `{"owner":"a","owner":"b"}`},
		{"fresh", fuzzJSON, `[{"owner":"a"}]`},
		{"a%2Fb", fuzzJSON, `{}`},
		{"a/b", fuzzJSON, `{}`},
		{"%zz", fuzzJSON, `{}`},
		{"", fuzzJSON, `{}`},
		{"fresh", fuzzJSON, `{"owner":"` + strings.Repeat("x", lockhttp.MaxBodyBytes) + `"}`},
		{"fresh", fuzzJSON, `{"owner":"a","mode":"shared"}`},
		{"fresh", fuzzJSON, `{"owner":"a","limit":3}`},
		{"fresh", fuzzJSON, `{"owner":"a","fair":true,"wait_ms":5}`},
		{"busy", fuzzJSON, `{"owner":"holder","mode":"shared"}`},
		{"busy", fuzzJSON, `{"owner":"other","limit":2}`},
		{"busy", fuzzJSON, `{"owner":"other","fair":true,"wait_ms":5}`},
		{"busy", fuzzJSON, `{"owner":"other","mode":"shared","wait_ms":5}`},
		{"fresh", fuzzJSON, `{"mode":"upgrade"}`},
		{"fresh", fuzzJSON, `{"limit":0}`},
		{"fresh", fuzzJSON, `{"mode":"shared","limit":2}`},
		{"fresh", fuzzJSON, `{"fair":"yes"}`},
	} {
		f.Add(c.name, c.ct, []byte(c.body))
	}
	f.Fuzz(func(t *testing.T, name, contentType string, body []byte) {
		e := newFuzzEnv(t)
		target := "/v1/locks/" + name + "/leases"
		before := e.snapshot(t, name)
		rec, ok := e.serve(http.MethodPost, target, contentType, body)
		if !ok {
			return
		}
		checkAnswer(t, http.MethodPost, target, rec, before, e.snapshot(t, name))
		if rec.Code == http.StatusOK || rec.Code == http.StatusCreated {
			e.checkGrant(t, target, rec)
		}
	})
}

// fuzzLease is the part of a Lease answer the fuzz targets check.
type fuzzLease struct {
	Lock         string    `json:"lock"`
	LeaseID      string    `json:"lease_id"`
	Owner        string    `json:"owner"`
	FencingToken uint64    `json:"fencing_token"`
	HoldCount    int       `json:"hold_count"`
	ExpiresAt    time.Time `json:"expires_at"`
}

// checkGrant checks that a successful acquire is what the store now holds:
// a 201 a fresh lease with one hold, a 200 another hold of a lease that was
// already there.
func (e *fuzzEnv) checkGrant(t *testing.T, target string, rec *httptest.ResponseRecorder) {
	t.Helper()
	var l fuzzLease
	if err := json.Unmarshal(rec.Body.Bytes(), &l); err != nil {
		t.Fatalf("POST %q: %d %s: %v", target, rec.Code, rec.Body, err)
	}
	st, err := e.mem.Inspect(context.Background(), l.Lock)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Held && time.Until(l.ExpiresAt) < time.Millisecond {
		return // a short TTL ran out already (expires_at is in milliseconds)
	}
	// The lease among the lock's holders: a shared lease or a permit is not
	// the exclusive Holder.
	h := st.Holder
	for i := range st.Holders {
		if st.Holders[i].Token == l.FencingToken {
			h = &st.Holders[i]
		}
	}
	if !st.Held || h == nil || h.Owner != l.Owner || h.Token != l.FencingToken || h.HoldCount != l.HoldCount {
		t.Fatalf("POST %q: %d %s, but the store holds %+v", target, rec.Code, rec.Body, st.Holders)
	}
	fresh := rec.Code == http.StatusCreated
	if fresh != (l.HoldCount == 1) || (!fresh && l.Lock == "busy" && l.LeaseID != e.busy.ID) {
		t.Fatalf("POST %q: %d %s; busy is held by lease %s", target, rec.Code, rec.Body, e.busy.ID)
	}
	if loc := rec.Header().Get("Location"); loc != "/v1/locks/"+l.Lock+"/leases/"+l.LeaseID {
		t.Fatalf("POST %q: %d with Location %q for %+v", target, rec.Code, loc, l)
	}
}

// FuzzRenewBody fuzzes POST /v1/locks/{name}/leases/{lease_id}/renew; a
// lease id of "{L}" is replaced by the lease that holds "busy".
func FuzzRenewBody(f *testing.F) {
	for _, c := range []struct{ name, leaseID, ct, body string }{
		{"busy", "{L}", fuzzJSON, `{"ttl_ms":60000}`},
		{"busy", "{L}", fuzzJSON, ``},
		{"busy", "{L}", fuzzJSON, `{"ttl_ms":null}`},
		{"busy", "{L}", fuzzJSON, `{"ttl_ms":1}`},
		{"busy", "{L}", fuzzJSON, `{"ttl_ms":"60000"}`},
		{"busy", "{L}", fuzzJSON, `{"ttl_ms":60000,"all":true}`},
		{"busy", "{L}", "text/plain", `{"ttl_ms":60000}`},
		{"busy", "01JD3Z8Q6W9M4T5R2K7X1B0C8N", fuzzJSON, `{}`},
		{"busy", "01jd3z8q6w9m4t5r2k7x1b0c8n", fuzzJSON, `{}`},
		{"zeta", "{L}", fuzzJSON, `{}`},
		{"fresh", "{L}", fuzzJSON, `{}`},
		{"bad name", "{L}", fuzzJSON, `{}`},
		{"busy", "", fuzzJSON, `{}`},
		{"busy", "{L}/x", fuzzJSON, `{}`},
	} {
		f.Add(c.name, c.leaseID, c.ct, []byte(c.body))
	}
	f.Fuzz(func(t *testing.T, name, leaseID, contentType string, body []byte) {
		e := newFuzzEnv(t)
		leaseID = strings.ReplaceAll(leaseID, "{L}", e.busy.ID)
		target := "/v1/locks/" + name + "/leases/" + leaseID + "/renew"
		before := e.snapshot(t, name)
		rec, ok := e.serve(http.MethodPost, target, contentType, body)
		if !ok {
			return
		}
		checkAnswer(t, http.MethodPost, target, rec, before, e.snapshot(t, name))
		if rec.Code == http.StatusOK {
			// Only busy's lease is known, so only it can be renewed.
			var l fuzzLease
			if err := json.Unmarshal(rec.Body.Bytes(), &l); err != nil || l.Lock != "busy" || l.LeaseID != e.busy.ID || l.FencingToken != e.busy.Token {
				t.Fatalf("POST %q: 200 %s (%v), but only lease %s of busy exists", target, rec.Body, err, e.busy.ID)
			}
		}
	})
}

// FuzzQuery fuzzes the query strings of GET /v1/locks/{name} and GET
// /v1/locks; "{I}" in the query is replaced by the named lock's current
// index, so that blocking queries that wait are reachable.
func FuzzQuery(f *testing.F) {
	for _, c := range []struct{ name, query string }{
		{"busy", ""},
		{"busy", "index={I}&wait_ms=1"},
		{"busy", "index={I}"},
		{"fresh", "index={I}&wait_ms=0"},
		{"busy", "index=stale&wait_ms=1000"},
		{"busy", "wait_ms=abc"},
		{"busy", "wait_ms=-1"},
		{"busy", "wait_ms=99999999999999999999"},
		{"busy", "index=a&index=b"},
		{"busy", "%zz"},
		{"busy", "a=1;b=2"},
		{"busy", "prefix=b&limit=1"},
		{"busy", "limit=1&cursor=YnVzeQ"},
		{"busy", "limit=0"},
		{"busy", "limit=1001&cursor=!!"},
		{"busy", "cursor=eyJ9"},
		{"busy", "prefix=%7B"},
		{"busy", "prefix=" + strings.Repeat("b", 201)},
		{"bad name", "x"},
		{"busy%3A2", ""},
	} {
		f.Add(c.name, c.query)
	}
	f.Fuzz(func(t *testing.T, name, query string) {
		e := newFuzzEnv(t)
		st, err := e.mem.Inspect(context.Background(), name)
		if err != nil {
			t.Fatal(err)
		}
		query = strings.ReplaceAll(query, "{I}", st.Index)
		for _, target := range []string{"/v1/locks/" + name + "?" + query, "/v1/locks?" + query} {
			before := e.snapshot(t, name)
			rec, ok := e.serve(http.MethodGet, target, "", nil)
			if !ok {
				continue
			}
			checkAnswer(t, http.MethodGet, target, rec, before, e.snapshot(t, name))
			if rec.Code == http.StatusOK && strings.HasPrefix(target, "/v1/locks/") {
				var st struct {
					Index string `json:"index"`
				}
				if err := json.Unmarshal(rec.Body.Bytes(), &st); err != nil || st.Index == "" || st.Index != rec.Header().Get("X-Lock-Index") {
					t.Fatalf("GET %q: 200 %s (%v) with X-Lock-Index %q", target, rec.Body, err, rec.Header().Get("X-Lock-Index"))
				}
			}
		}
	})
}

// FuzzMultiBody fuzzes POST /v1/leases and DELETE /v1/leases: the body of
// a multi-lock and the query of a multi-release ("{L}" stands for busy's
// lease). Besides the invariants of every answer, a multi-lock is all or
// nothing: a 201 holds every lease it answers, anything else holds none.
func FuzzMultiBody(f *testing.F) {
	for _, c := range []struct{ body, query string }{
		{`{"locks":["fresh","fresh:2"],"owner":"a"}`, "id=busy/{L}"},
		{`{"locks":["fresh","busy"],"owner":"a","wait_ms":1}`, "id=busy/{L}&id=zeta/{L}"},
		{`{"locks":["busy","zeta"],"owner":"holder","mode":"exclusive"}`, "id=busy/{L}&id=busy/{L}"},
		{`{"locks":["a","busy","c"],"owner":"other"}`, "id=busy/{L}&id=a/{L}"},
		{`{"locks":["fresh"],"mode":"shared","ttl_ms":1000,"metadata":{"k":"v"}}`, "id=busy"},
		{`{"locks":["fresh","fresh"]}`, "id=busy/01JD3Z8Q6W9M4T5R2K7X1B0C8N"},
		{`{"locks":[]}`, ""},
		{`{"locks":["fresh"],"fair":true}`, "id=%zz"},
		{`{"locks":["fresh"],"limit":2}`, "id=bad%20name/{L}"},
		{`{"locks":"fresh"}`, "id=fresh:2/{L}"},
		{`{"locks":["a","b"],"locks":["c"]}`, "id="},
		{``, "id=busy/{L}/x"},
	} {
		f.Add([]byte(c.body), c.query)
	}
	names := []string{"fresh", "fresh:2", "a", "b", "c"}
	f.Fuzz(func(t *testing.T, body []byte, query string) {
		e := newFuzzEnv(t)
		check := append(slices.Clone(fuzzHeld), names...)
		before := e.snapshot(t, check...)
		rec, ok := e.serve(http.MethodPost, "/v1/leases", fuzzJSON, body)
		if !ok {
			return
		}
		checkAnswer(t, http.MethodPost, "/v1/leases", rec, before, e.snapshot(t, check...))
		if rec.Code == http.StatusCreated {
			var out struct{ Leases []fuzzLease }
			if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || len(out.Leases) == 0 {
				t.Fatalf("POST /v1/leases: 201 %s (%v)", rec.Body, err)
			}
			for _, l := range out.Leases {
				st, err := e.mem.Inspect(context.Background(), l.Lock)
				if err != nil {
					t.Fatal(err)
				}
				if !st.Held && time.Until(l.ExpiresAt) >= time.Millisecond {
					t.Fatalf("POST /v1/leases: 201 %s, but %s is free", rec.Body, l.Lock)
				}
			}
		} else if !maps.Equal(contentOf(before), contentOf(e.snapshot(t, check...))) {
			t.Fatalf("POST /v1/leases: %d %s changed the store", rec.Code, rec.Body)
		}

		target := "/v1/leases?" + strings.ReplaceAll(query, "{L}", e.busy.ID)
		before = e.snapshot(t, check...)
		if rec, ok = e.serve(http.MethodDelete, target, "", nil); ok {
			checkAnswer(t, http.MethodDelete, target, rec, before, e.snapshot(t, check...))
		}
	})
}
