package http_test

import (
	"context"
	"maps"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/lockapi/lockapi/event"
	"github.com/lockapi/lockapi/internal/auth"
	lockhttp "github.com/lockapi/lockapi/internal/http"
	"github.com/lockapi/lockapi/internal/lock"
)

// TestUpdate checks PATCH /v1/locks/{name}/leases/{lease_id}: the lease's
// metadata is replaced and nothing else, validation is the acquire's, and
// a lease that is gone is 410.
func TestUpdate(t *testing.T) {
	t.Parallel()
	e := MustOpenEnv(t, lockhttp.Config{})

	t.Run("ReplacesMetadataOnly200", func(t *testing.T) {
		e := e.For(t)
		l := e.Acquire("up:a", `{"owner":"a","ttl_ms":45000,"metadata":{"old":"1"}}`)
		resp := e.Do("PATCH", "/v1/locks/up:a/leases/"+l.LeaseID, `{"metadata":{"addr":"10.0.0.7:9000"}}`)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d %s", resp.StatusCode, resp.Body)
		}
		got := Decode[lockhttp.Lease](t, resp)
		if got.LeaseID != l.LeaseID || got.FencingToken != l.FencingToken || got.TTLMs != 45000 || got.ExpiresAt != l.ExpiresAt ||
			got.HoldCount != 1 || !maps.Equal(got.Metadata, map[string]string{"addr": "10.0.0.7:9000"}) {
			t.Fatalf("updated lease %+v, acquired %+v", got, l)
		}
		if h := e.State("up:a").Holder; h == nil || !maps.Equal(h.Metadata, got.Metadata) {
			t.Fatalf("holder %+v", h)
		}
		// {} removes every label.
		got = Decode[lockhttp.Lease](t, e.Do("PATCH", "/v1/locks/up:a/leases/"+l.LeaseID, `{"metadata":{}}`))
		if len(got.Metadata) != 0 || len(e.State("up:a").Holder.Metadata) != 0 {
			t.Fatalf("metadata after {}: %v", got.Metadata)
		}
	})

	t.Run("Invalid400StoresNothing", func(t *testing.T) {
		e := e.Malformed(t)
		l := e.Acquire("up:bad", `{"owner":"a","metadata":{"keep":"1"}}`)
		path := "/v1/locks/up:bad/leases/" + l.LeaseID
		var many []string
		for i := range lock.MaxMetadataKeys + 1 {
			many = append(many, `"k`+string(rune('a'+i))+`":"v"`)
		}
		for _, body := range []string{
			``, `{}`, `{"metadata":null}`, `{"metadata":{"a":null}}`, `{"metadata":{"":"v"}}`,
			`{"metadata":{` + strings.Join(many, ",") + `}}`,
			`{"metadata":{"big":"` + strings.Repeat("x", lock.MaxMetadataBytes) + `"}}`,
			`{"metadata":{},"ttl_ms":1000}`, `{"metadata":"v"}`,
		} {
			WantProblem(t, e.Do("PATCH", path, body), http.StatusBadRequest, "invalid-request")
		}
		WantProblem(t, e.Do("PATCH", "/v1/locks/up:bad/leases/not-a-ulid", `{"metadata":{}}`), http.StatusBadRequest, "invalid-request")
		if h := e.State("up:bad").Holder; h == nil || !maps.Equal(h.Metadata, map[string]string{"keep": "1"}) {
			t.Fatalf("holder after refused updates: %+v", h)
		}
	})

	t.Run("GoneLease410", func(t *testing.T) {
		e := e.For(t)
		l := e.Acquire("up:gone", `{"owner":"a"}`)
		WantProblem(t, e.Do("PATCH", "/v1/locks/up:gone/leases/01JD3Z8Q6W9M4T5R2K7X1B0C8N", `{"metadata":{}}`), http.StatusGone, "lease-lost")
		e.Do("DELETE", "/v1/locks/up:gone/leases/"+l.LeaseID, "")
		WantProblem(t, e.Do("PATCH", "/v1/locks/up:gone/leases/"+l.LeaseID, `{"metadata":{"v":"1"}}`), http.StatusGone, "lease-lost")
	})
}

// TestUpdate_HolderOnly checks that only the principal that acquired a
// lease (or an admin) updates it, as renew and release ask.
func TestUpdate_HolderOnly(t *testing.T) {
	t.Parallel()
	e, as := MustOpenKeyedEnv(t,
		KeySpec{"team-a", []auth.Scope{auth.ScopeRead, auth.ScopeWrite}, []string{"*"}},
		KeySpec{"team-b", []auth.Scope{auth.ScopeRead, auth.ScopeWrite}, []string{"*"}},
		KeySpec{"reader", []auth.Scope{auth.ScopeRead}, []string{"*"}})
	asA, asB, asR := as[0], as[1], as[2]
	resp := e.Do("POST", "/v1/locks/up:mine/leases", `{"owner":"a","metadata":{"v":"a"}}`, asA...)
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("acquire: %d %s", resp.StatusCode, resp.Body)
	}
	l := Decode[lockhttp.Lease](t, resp)
	path := "/v1/locks/up:mine/leases/" + l.LeaseID
	WantProblem(t, e.Do("PATCH", path, `{"metadata":{"v":"b"}}`, asB...), http.StatusForbidden, "forbidden")
	WantProblem(t, e.Do("PATCH", path, `{"metadata":{"v":"r"}}`, asR...), http.StatusForbidden, "forbidden")
	WantProblem(t, e.Do("PATCH", path, `{"metadata":{"v":"x"}}`), http.StatusUnauthorized, "unauthorized")
	if h := e.State("up:mine").Holder; h == nil || h.Metadata["v"] != "a" {
		t.Fatalf("holder after refused updates: %+v", h)
	}
	if got := Decode[lockhttp.Lease](t, e.Do("PATCH", path, `{"metadata":{"v":"a2"}}`, asA...)); got.Metadata["v"] != "a2" {
		t.Fatalf("the holder's update: %+v", got)
	}
}

// TestUpdate_EventAndIndex checks that an update is an updated event with
// the new metadata, and a new index that wakes a parked blocking query.
func TestUpdate_EventAndIndex(t *testing.T) {
	t.Parallel()
	e := MustOpenHookedEnv(t, lockhttp.Config{})
	l := e.Acquire("up:ev", `{"owner":"leader-a"}`)
	index := Decode[lockhttp.LockState](t, e.Do("GET", "/v1/locks/up:ev", "")).Index
	stream := e.OpenEvents("lock=up:ev&after=0")
	if ev := stream.Event(); ev.Type != event.Granted {
		t.Fatalf("first event %+v", ev)
	}

	done := make(chan Response, 1)
	go func() {
		resp, err := e.send(context.Background(), "GET", "/v1/locks/up:ev?index="+url.QueryEscape(index)+"&wait_ms=60000", "")
		if err != nil {
			t.Error(err)
		}
		done <- resp
	}()
	Within(t, e.Hooks.Watching, "watcher registered")
	if resp := e.Do("PATCH", "/v1/locks/up:ev/leases/"+l.LeaseID, `{"metadata":{"addr":"10.0.0.7:9000"}}`); resp.StatusCode != http.StatusOK {
		t.Fatalf("update: %d %s", resp.StatusCode, resp.Body)
	}
	st := Decode[lockhttp.LockState](t, Within(t, done, "blocking query answered"))
	if st.Index == index || st.Holder == nil || st.Holder.Metadata["addr"] != "10.0.0.7:9000" || st.FencingToken != l.FencingToken {
		t.Fatalf("state after the update %+v (index was %q)", st, index)
	}

	ev := stream.Event()
	if ev.Type != event.Updated || ev.Owner != "leader-a" || ev.FencingToken != l.FencingToken || ev.HoldCount != 1 ||
		!maps.Equal(ev.Metadata, map[string]string{"addr": "10.0.0.7:9000"}) {
		t.Fatalf("event %+v", ev)
	}
	e.Do("PATCH", "/v1/locks/up:ev/leases/"+l.LeaseID, `{"metadata":{}}`)
	if ev := stream.Event(); ev.Type != event.Updated || ev.Metadata == nil || len(ev.Metadata) != 0 {
		t.Fatalf("event of {} %+v", ev)
	}
	// updated is a type the stream's filter takes.
	filtered := e.OpenEvents("lock=up:ev&types=updated&after=0")
	if ev := filtered.Event(); ev.Type != event.Updated {
		t.Fatalf("types=updated gave %+v", ev)
	}
}
