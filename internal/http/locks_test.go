package http_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"

	lockhttp "github.com/lockapi/lockapi/internal/http"
	"github.com/lockapi/lockapi/internal/lock"
)

func TestInspect(t *testing.T) {
	e := MustOpenEnv(t, lockhttp.Config{})

	t.Run("NeverUsedIsFree200", func(t *testing.T) {
		e := e.For(t)
		resp := e.Do("GET", "/v1/locks/never", "")
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status = %d", resp.StatusCode)
		}
		st := Decode[lockhttp.LockState](t, resp)
		if st.Lock != "never" || st.Held || st.Holder != nil || st.FencingToken != 0 || st.Index == "" {
			t.Fatalf("state = %+v", st)
		}
		for _, want := range []string{`"holder":null`, `"mode":null`, `"holders":[]`, `"queue_length":0`, `"limit":0`} {
			if !strings.Contains(string(resp.Body), want) {
				t.Errorf("a free lock's state lacks %s: %s", want, resp.Body)
			}
		}
		if got := resp.Header.Get("X-Lock-Index"); got != st.Index {
			t.Errorf("X-Lock-Index = %q, index = %q", got, st.Index)
		}
	})

	t.Run("HeldShowsHolderNotLeaseID200", func(t *testing.T) {
		e := e.For(t)
		l := e.Acquire("held", `{"owner":"a","metadata":{"k":"v"}}`)
		resp := e.Do("GET", "/v1/locks/held", "")
		st := Decode[lockhttp.LockState](t, resp)
		if !st.Held || st.Holder == nil || st.Holder.Owner != "a" || st.Holder.FencingToken != l.FencingToken ||
			st.Holder.HoldCount != 1 || st.Holder.ExpiresAt != l.ExpiresAt || st.Holder.AcquiredAt != l.AcquiredAt ||
			st.Holder.Metadata["k"] != "v" || st.FencingToken != l.FencingToken {
			t.Fatalf("state = %+v holder %+v, lease %+v", st, st.Holder, l)
		}
		if st.Mode == nil || *st.Mode != lock.KindExclusive || len(st.Holders) != 1 || !reflect.DeepEqual(st.Holders[0], *st.Holder) ||
			st.Holder.Mode != lock.Exclusive || st.QueueLength != 0 || st.Limit != 0 {
			t.Fatalf("a plain lock's state %s", resp.Body)
		}
		if strings.Contains(string(resp.Body), l.LeaseID) {
			t.Fatalf("the lease id leaked: %s", resp.Body)
		}
	})

	t.Run("FreedKeepsLastToken200", func(t *testing.T) {
		e := e.For(t)
		l := e.Acquire("freed", `{"owner":"a"}`)
		e.Do("DELETE", "/v1/locks/freed/leases/"+l.LeaseID, "")
		st := Decode[lockhttp.LockState](t, e.Do("GET", "/v1/locks/freed", ""))
		if st.Held || st.Holder != nil || st.FencingToken != l.FencingToken {
			t.Fatalf("state = %+v", st)
		}
	})
}

func TestInspect_BlockingQuery(t *testing.T) {
	t.Run("ReturnsWhenStateChanges", func(t *testing.T) {
		e := MustOpenHookedEnv(t, lockhttp.Config{})
		index := Decode[lockhttp.LockState](t, e.Do("GET", "/v1/locks/watched", "")).Index

		done := make(chan Response, 1)
		go func() {
			resp, err := e.send(context.Background(), "GET", "/v1/locks/watched?index="+url.QueryEscape(index)+"&wait_ms=60000", "")
			if err != nil {
				t.Error(err)
			}
			done <- resp
		}()
		if kind := Within(t, e.Hooks.Watching, "watcher registered"); kind != lock.WatchChanges {
			t.Fatalf("watch kind %v", kind)
		}
		l := e.Acquire("watched", `{"owner":"a"}`)

		resp := Within(t, done, "blocking query answered")
		st := Decode[lockhttp.LockState](t, resp)
		if !st.Held || st.Holder.Owner != "a" || st.FencingToken != l.FencingToken || st.Index == index {
			t.Fatalf("state = %+v", st)
		}
		if resp.Header.Get("X-Lock-Index") != st.Index {
			t.Errorf("X-Lock-Index = %q, index %q", resp.Header.Get("X-Lock-Index"), st.Index)
		}
	})

	t.Run("StaleIndexAnswersAtOnce", func(t *testing.T) {
		e := MustOpenEnv(t, lockhttp.Config{})
		e.Acquire("stale", `{"owner":"a"}`)
		start := time.Now()
		st := Decode[lockhttp.LockState](t, e.Do("GET", "/v1/locks/stale?index=not-the-index&wait_ms=60000", ""))
		if !st.Held || time.Since(start) > promptly {
			t.Fatalf("state %+v after %v", st, time.Since(start))
		}
	})

	t.Run("NoChangeAnswersAfterWait", func(t *testing.T) {
		e := MustOpenEnv(t, lockhttp.Config{MaxWait: 80 * time.Millisecond})
		index := Decode[lockhttp.LockState](t, e.Do("GET", "/v1/locks/quiet", "")).Index
		start := time.Now()
		st := Decode[lockhttp.LockState](t, e.Do("GET", "/v1/locks/quiet?index="+url.QueryEscape(index)+"&wait_ms=99999999", ""))
		if d := time.Since(start); d < 80*time.Millisecond || d > promptly {
			t.Errorf("answered after %v, want about MaxWait", d)
		}
		if st.Index != index {
			t.Errorf("index changed: %q -> %q", index, st.Index)
		}
	})
}

func TestForceRelease(t *testing.T) {
	e := MustOpenEnv(t, lockhttp.Config{})

	t.Run("HeldReleased200", func(t *testing.T) {
		e := e.For(t)
		l := e.Acquire("force", `{"owner":"a"}`)
		r := Decode[lockhttp.ForceReleaseResult](t, e.Do("DELETE", "/v1/locks/force", ""))
		if r != (lockhttp.ForceReleaseResult{Lock: "force", Released: true}) {
			t.Fatalf("result = %+v", r)
		}
		if e.State("force").Held {
			t.Fatal("still held")
		}
		WantProblem(t, e.Do("DELETE", "/v1/locks/force/leases/"+l.LeaseID, ""), http.StatusGone, "lease-lost")
		if next := e.Acquire("force", `{"owner":"b"}`); next.FencingToken <= l.FencingToken {
			t.Errorf("token %d after %d", next.FencingToken, l.FencingToken)
		}
	})

	t.Run("FreeNotReleased200", func(t *testing.T) {
		e := e.For(t)
		r := Decode[lockhttp.ForceReleaseResult](t, e.Do("DELETE", "/v1/locks/free", ""))
		if r != (lockhttp.ForceReleaseResult{Lock: "free", Released: false}) {
			t.Fatalf("result = %+v", r)
		}
	})
}

func TestList(t *testing.T) {
	e := MustOpenEnv(t, lockhttp.Config{})
	for i := range 5 {
		e.Acquire(fmt.Sprintf("jobs:%d", i), `{"owner":"a"}`)
	}
	e.Acquire("other", `{"owner":"a"}`)

	t.Run("PagesWithCursor200", func(t *testing.T) {
		e := e.For(t)
		var names []string
		path := "/v1/locks?prefix=jobs:&limit=2"
		for pages := 0; ; pages++ {
			if pages > 5 {
				t.Fatal("too many pages")
			}
			page := Decode[lockhttp.LockList](t, e.Do("GET", path, ""))
			for _, st := range page.Locks {
				if !st.Held || st.Holder == nil {
					t.Errorf("listed state %+v", st)
				}
				names = append(names, st.Lock)
			}
			if page.NextCursor == nil {
				break
			}
			path = "/v1/locks?prefix=jobs:&limit=2&cursor=" + url.QueryEscape(*page.NextCursor)
		}
		if got := strings.Join(names, ","); got != "jobs:0,jobs:1,jobs:2,jobs:3,jobs:4" {
			t.Fatalf("listed %s", got)
		}
	})

	t.Run("DefaultsListAll200", func(t *testing.T) {
		e := e.For(t)
		resp := e.Do("GET", "/v1/locks", "")
		page := Decode[lockhttp.LockList](t, resp)
		if len(page.Locks) != 6 || page.NextCursor != nil {
			t.Fatalf("page = %+v", page)
		}
		if !strings.Contains(string(resp.Body), `"next_cursor":null`) {
			t.Errorf("next_cursor not null: %s", resp.Body)
		}
	})

	t.Run("NoMatchIsEmptyArray200", func(t *testing.T) {
		e := e.For(t)
		resp := e.Do("GET", "/v1/locks?prefix=nothing", "")
		if !strings.Contains(string(resp.Body), `"locks":[]`) {
			t.Fatalf("body %s", resp.Body)
		}
	})

	t.Run("ForeignCursor400", func(t *testing.T) {
		e := e.For(t)
		p := WantProblem(t, e.Do("GET", "/v1/locks?cursor=%21%21", ""), http.StatusBadRequest, "invalid-request")
		if len(p.Errors) != 1 || p.Errors[0].Field != "cursor" {
			t.Fatalf("errors = %+v", p.Errors)
		}
	})
}
