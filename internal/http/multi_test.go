package http_test

import (
	"context"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/lockapi/lockapi/internal/auth"
	lockhttp "github.com/lockapi/lockapi/internal/http"
	"github.com/lockapi/lockapi/internal/lock"
)

// AcquireAll takes a multi-lock and fails the test unless it is granted.
func (e *Env) AcquireAll(body string) []lockhttp.Lease {
	e.t.Helper()
	resp := e.Do("POST", "/v1/leases", body)
	if resp.StatusCode != http.StatusCreated {
		e.t.Fatalf("multi-lock %s: %d %s", body, resp.StatusCode, resp.Body)
	}
	return Decode[lockhttp.MultiLeases](e.t, resp).Leases
}

// owners returns who holds each name in the store, "" when free.
func (e *Env) owners(names ...string) string {
	e.t.Helper()
	var out []string
	for _, name := range names {
		owner := ""
		if st := e.State(name); st.Held && st.Holder != nil {
			owner = st.Holder.Owner
		}
		out = append(out, owner)
	}
	return strings.Join(out, ",")
}

func TestAcquireAll(t *testing.T) {
	t.Run("Granted201InRequestOrder", func(t *testing.T) {
		e := MustOpenEnv(t, lockhttp.Config{})
		leases := e.AcquireAll(`{"locks":["m:c","m:a","m:b"],"owner":"me","ttl_ms":45000,"metadata":{"job":"j"}}`)
		if len(leases) != 3 {
			t.Fatalf("leases %+v", leases)
		}
		for i, name := range []string{"m:c", "m:a", "m:b"} {
			l := leases[i]
			if l.Lock != name || l.Owner != "me" || l.TTLMs != 45000 || l.HoldCount != 1 || l.Metadata["job"] != "j" ||
				l.Mode != lock.Exclusive || l.Limit != 0 || len(l.LeaseID) != 26 ||
				!strings.HasPrefix(l.ReleaseURL, "/v1/locks/"+name+"/leases/"+l.LeaseID+"/release?") {
				t.Errorf("lease %d = %+v, want one of %s", i, l, name)
			}
		}
		if got := e.owners("m:a", "m:b", "m:c"); got != "me,me,me" {
			t.Fatalf("holders %s", got)
		}
		// Each lease is released on its own, here through its release URL.
		if resp := e.Do("POST", leases[0].ReleaseURL, ""); resp.StatusCode != http.StatusOK {
			t.Fatalf("release URL: %d %s", resp.StatusCode, resp.Body)
		}
		if got := e.owners("m:a", "m:b", "m:c"); got != "me,me," {
			t.Fatalf("holders %s after releasing m:c", got)
		}
	})

	t.Run("OneHeldByAnother409AndNoneHeld", func(t *testing.T) {
		e := MustOpenEnv(t, lockhttp.Config{})
		holder := e.Acquire("b", `{"owner":"other","ttl_ms":2500}`)
		resp := e.Do("POST", "/v1/leases", `{"locks":["a","b","c"],"owner":"me"}`)
		p := WantProblem(t, resp, http.StatusConflict, "lock-held")
		if p.Lock != "b" || p.Holder == nil || p.Holder.Owner != "other" || p.Holder.FencingToken != holder.FencingToken {
			t.Fatalf("problem %+v holder %+v", p, p.Holder)
		}
		if !strings.Contains(p.Detail, `"b"`) || p.Instance != "/v1/leases" {
			t.Errorf("detail %q instance %q", p.Detail, p.Instance)
		}
		if ra := resp.Header.Get("Retry-After"); ra != "3" {
			t.Errorf("Retry-After = %q, want 3", ra)
		}
		if got := e.owners("a", "b", "c"); got != ",other," {
			t.Fatalf("holders after the refusal %s, want only b held", got)
		}
	})

	t.Run("WaitsHoldingNothingThenGrants201", func(t *testing.T) {
		e := MustOpenHookedEnv(t, lockhttp.Config{})
		holder := e.Acquire("b", `{"owner":"other","ttl_ms":600000}`)
		done := make(chan Response, 1)
		go func() {
			resp, err := e.send(context.Background(), "POST", "/v1/leases", `{"locks":["c","b","a"],"owner":"me","wait_ms":60000}`)
			if err != nil {
				t.Error(err)
			}
			done <- resp
		}()
		if kind := Within(t, e.Hooks.Watching, "multi-lock waits"); kind != lock.WaitForRelease {
			t.Fatalf("watch kind %v", kind)
		}
		// After registering its watch the multi-lock tries the set once
		// more, taking a for a moment; then it holds nothing while it waits.
		deadline := time.Now().Add(2 * time.Second)
		for got := e.owners("a", "b", "c"); got != ",other,"; got = e.owners("a", "b", "c") {
			if time.Now().After(deadline) {
				t.Fatalf("while waiting: holders %s", got)
			}
			time.Sleep(time.Millisecond)
		}
		e.Do("DELETE", "/v1/locks/b/leases/"+holder.LeaseID, "")
		resp := Within(t, done, "multi-lock answered")
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("status %d %s", resp.StatusCode, resp.Body)
		}
		leases := Decode[lockhttp.MultiLeases](t, resp).Leases
		if len(leases) != 3 || leases[0].Lock != "c" || leases[1].Lock != "b" || leases[2].Lock != "a" {
			t.Fatalf("leases %+v", leases)
		}
		if got := e.owners("a", "b", "c"); got != "me,me,me" {
			t.Fatalf("holders %s", got)
		}
	})

	t.Run("WaitRunsOut409HoldingNothing", func(t *testing.T) {
		e := MustOpenEnv(t, lockhttp.Config{})
		e.Acquire("b", `{"owner":"other","ttl_ms":600000}`)
		WantProblem(t, e.Do("POST", "/v1/leases", `{"locks":["a","b"],"owner":"me","wait_ms":50}`), http.StatusConflict, "lock-held")
		if got := e.owners("a", "b"); got != ",other" {
			t.Fatalf("holders %s", got)
		}
	})

	t.Run("ReentrantHoldGivenBack", func(t *testing.T) {
		e := MustOpenEnv(t, lockhttp.Config{})
		mine := e.Acquire("a", `{"owner":"me"}`)
		e.Acquire("b", `{"owner":"other"}`)
		WantProblem(t, e.Do("POST", "/v1/leases", `{"locks":["a","b"],"owner":"me"}`), http.StatusConflict, "lock-held")
		if st := e.State("a"); !st.Held || st.Holder.Token != mine.FencingToken || st.Holder.HoldCount != 1 {
			t.Fatalf("a = %+v, want my lease with one hold", st.Holder)
		}
		// Once b is free, the owner's lease of a gains a hold.
		e.Mem.ForceRelease(context.Background(), "b", "admin")
		leases := e.AcquireAll(`{"locks":["a","b"],"owner":"me"}`)
		if leases[0].LeaseID != mine.LeaseID || leases[0].HoldCount != 2 || leases[1].HoldCount != 1 {
			t.Fatalf("leases %+v", leases)
		}
	})

	t.Run("Sixty-fourNames201", func(t *testing.T) {
		e := MustOpenEnv(t, lockhttp.Config{})
		var names []string
		for i := range lock.MaxMultiLocks {
			names = append(names, fmt.Sprintf(`"n%02d"`, i))
		}
		if leases := e.AcquireAll(`{"locks":[` + strings.Join(names, ",") + `]}`); len(leases) != lock.MaxMultiLocks {
			t.Fatalf("%d leases", len(leases))
		}
	})
}

// TestAcquireAll_Invalid sends multi-locks that must be refused with a 400
// naming the field, and must take nothing.
func TestAcquireAll_Invalid(t *testing.T) {
	e := MustOpenEnv(t, lockhttp.Config{})
	var names []string
	for i := range lock.MaxMultiLocks + 1 {
		names = append(names, fmt.Sprintf(`"n%02d"`, i))
	}
	for _, tc := range []struct {
		name, body string
		header     []string
		field      string
	}{
		{"NoBody", ``, nil, "locks"},
		{"NoLocks", `{"owner":"me"}`, nil, "locks"},
		{"NullLocks", `{"locks":null}`, nil, "locks"},
		{"EmptyLocks", `{"locks":[]}`, nil, "locks"},
		{"Sixty-fiveNames", `{"locks":[` + strings.Join(names, ",") + `]}`, nil, "locks"},
		{"Duplicate", `{"locks":["n00","n01","n00"]}`, nil, "locks"},
		{"BadName", `{"locks":["n00","n 01"]}`, nil, "locks"},
		{"EmptyName", `{"locks":["n00",""]}`, nil, "locks"},
		{"LocksString", `{"locks":"n00"}`, nil, "locks"},
		{"LocksNumbers", `{"locks":[1,2]}`, nil, "locks"},
		{"Fair", `{"locks":["n00"],"fair":true}`, nil, "fair"},
		{"Limit", `{"locks":["n00"],"limit":2}`, nil, "limit"},
		{"MinReplicas", `{"locks":["n00"],"min_replicas":0}`, nil, "min_replicas"},
		{"BadMode", `{"locks":["n00"],"mode":"upgrade"}`, nil, "mode"},
		{"EmptyMode", `{"locks":["n00"],"mode":""}`, nil, "mode"},
		{"BadOwner", `{"locks":["n00"],"owner":""}`, nil, "owner"},
		{"TTLTooShort", `{"locks":["n00"],"ttl_ms":1}`, nil, "ttl_ms"},
		{"WaitNegative", `{"locks":["n00"],"wait_ms":-1}`, nil, "wait_ms"},
		{"DuplicateMember", `{"locks":["n00"],"locks":["n01"]}`, nil, "locks"},
		{"IdempotencyKey", `{"locks":["n00"]}`, []string{"Idempotency-Key", "k1"}, "Idempotency-Key"},
	} {
		t.Run(tc.name+"400", func(t *testing.T) {
			e := e.Malformed(t)
			before := snapshot(t, e)
			p := WantProblem(t, e.Do("POST", "/v1/leases", tc.body, tc.header...), http.StatusBadRequest, "invalid-request")
			if len(p.Errors) == 0 || p.Errors[0].Field != tc.field {
				t.Fatalf("errors = %+v, want field %q first", p.Errors, tc.field)
			}
			if got := e.owners("n00", "n01"); got != "," {
				t.Fatalf("a refused multi-lock took %s", got)
			}
			if after := snapshot(t, e); !reflect.DeepEqual(before, after) {
				t.Fatalf("store changed:\nbefore %+v\nafter  %+v", before, after)
			}
		})
	}
}

func TestReleaseAll(t *testing.T) {
	e := MustOpenEnv(t, lockhttp.Config{})

	ids := func(leases ...lockhttp.Lease) string {
		var q []string
		for _, l := range leases {
			q = append(q, "id="+l.Lock+"/"+l.LeaseID)
		}
		return "/v1/leases?" + strings.Join(q, "&")
	}

	t.Run("ReleasesEveryHold200", func(t *testing.T) {
		e := e.For(t)
		leases := e.AcquireAll(`{"locks":["r:a","r:b"],"owner":"me"}`)
		e.Acquire("r:a", `{"owner":"me"}`) // a second hold of r:a's lease
		resp := e.Do("DELETE", ids(leases...), "")
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d %s", resp.StatusCode, resp.Body)
		}
		res := Decode[lockhttp.MultiReleaseResult](t, resp).Results
		if len(res) != 2 {
			t.Fatalf("results %+v", res)
		}
		for i, r := range res {
			if r.Lock != leases[i].Lock || r.LeaseID != leases[i].LeaseID || !r.Released || r.Problem != nil {
				t.Errorf("result %d = %+v", i, r)
			}
		}
		if got := e.owners("r:a", "r:b"); got != "," {
			t.Fatalf("holders %s after releasing both", got)
		}
		// A retry answers the same: the release is safe to repeat.
		if again := Decode[lockhttp.MultiReleaseResult](t, e.Do("DELETE", ids(leases...), "")).Results; !again[0].Released || !again[1].Released {
			t.Fatalf("retry %+v", again)
		}
	})

	t.Run("GoneLeaseReportedOthersReleased200", func(t *testing.T) {
		e := e.For(t)
		leases := e.AcquireAll(`{"locks":["g:a","g:b"],"owner":"me"}`)
		e.Mem.ForceRelease(context.Background(), "g:a", "admin")
		res := Decode[lockhttp.MultiReleaseResult](t, e.Do("DELETE", ids(leases...), "")).Results
		if len(res) != 2 || res[0].Released || res[0].Problem == nil || !res[1].Released || res[1].Problem != nil {
			t.Fatalf("results %+v", res)
		}
		p := res[0].Problem
		if p.Type != lockhttp.ProblemTypeBase+"lease-lost" || p.Status != http.StatusGone || !strings.Contains(p.Detail, leases[0].LeaseID) {
			t.Fatalf("problem %+v", p)
		}
		if e.State("g:b").Held {
			t.Fatal("g:b still held")
		}
	})
}

// TestMulti_Authorization checks that a multi-lock and a multi-release ask
// for every name what a single one asks, before they change anything.
func TestMulti_Authorization(t *testing.T) {
	e, as := MustOpenKeyedEnv(t,
		KeySpec{"team-a", []auth.Scope{auth.ScopeRead, auth.ScopeWrite}, []string{"a:*", "shared:*"}},
		KeySpec{"team-b", []auth.Scope{auth.ScopeRead, auth.ScopeWrite}, []string{"b:*", "shared:*"}},
		KeySpec{"reader", []auth.Scope{auth.ScopeRead}, []string{"*"}})
	asA, asB, asR := as[0], as[1], as[2]

	t.Run("NameOutsidePatterns403", func(t *testing.T) {
		e := e.For(t)
		p := WantProblem(t, e.Do("POST", "/v1/leases", `{"locks":["a:1","b:1"]}`, asA...), http.StatusForbidden, "forbidden")
		if !strings.Contains(p.Detail, `"b:1"`) {
			t.Errorf("detail %q", p.Detail)
		}
		if got := e.owners("a:1", "b:1"); got != "," {
			t.Fatalf("a forbidden multi-lock took %s", got)
		}
	})

	t.Run("NoWriteScope403", func(t *testing.T) {
		e := e.For(t)
		WantProblem(t, e.Do("POST", "/v1/leases", `{"locks":["a:1"]}`, asR...), http.StatusForbidden, "forbidden")
		WantProblem(t, e.Do("DELETE", "/v1/leases?id=a:1/01JD3Z8Q6W9M4T5R2K7X1B0C8N", "", asR...), http.StatusForbidden, "forbidden")
	})

	t.Run("ReleaseOutsidePatterns403ReleasesNothing", func(t *testing.T) {
		e := e.For(t)
		resp := e.Do("POST", "/v1/leases", `{"locks":["a:2","shared:2"],"owner":"a"}`, asA...)
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("status %d %s", resp.StatusCode, resp.Body)
		}
		leases := Decode[lockhttp.MultiLeases](t, resp).Leases
		path := "/v1/leases?id=shared:2/" + leases[1].LeaseID + "&id=a:2/" + leases[0].LeaseID
		WantProblem(t, e.Do("DELETE", path, "", asB...), http.StatusForbidden, "forbidden")
		if got := e.owners("a:2", "shared:2"); got != "a,a" {
			t.Fatalf("holders %s after a forbidden release", got)
		}

		// Another principal's lease, on a name both may use, is reported in
		// its result, as a single release would answer it.
		res := Decode[lockhttp.MultiReleaseResult](t, e.Do("DELETE", "/v1/leases?id=shared:2/"+leases[1].LeaseID, "", asB...)).Results
		if len(res) != 1 || res[0].Released || res[0].Problem == nil || res[0].Problem.Status != http.StatusForbidden {
			t.Fatalf("results %+v", res)
		}
		if got := e.owners("shared:2"); got != "a" {
			t.Fatalf("holder %s after another principal's release", got)
		}
		res = Decode[lockhttp.MultiReleaseResult](t, e.Do("DELETE", path, "", asA...)).Results
		if len(res) != 2 || !res[0].Released || !res[1].Released {
			t.Fatalf("results %+v", res)
		}
	})
}
