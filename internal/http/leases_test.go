package http_test

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	lockhttp "github.com/lockapi/lockapi/internal/http"
	"github.com/lockapi/lockapi/internal/lock"
)

func TestAcquire(t *testing.T) {
	t.Run("FreshGrant201", func(t *testing.T) {
		e := MustOpenEnv(t, lockhttp.Config{})
		before := time.Now()
		resp := e.Do("POST", "/v1/locks/deploy:prod/leases", `{"owner":"worker-7","ttl_ms":45000,"wait_ms":0,"metadata":{"job":"nightly"}}`)
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("status = %d, want 201; %s", resp.StatusCode, resp.Body)
		}
		l := Decode[lockhttp.Lease](t, resp)
		if l.Lock != "deploy:prod" || l.Owner != "worker-7" || l.HoldCount != 1 || l.TTLMs != 45000 || l.Metadata["job"] != "nightly" {
			t.Errorf("lease = %+v", l)
		}
		if l.FencingToken == 0 || len(l.LeaseID) != 26 {
			t.Errorf("token %d, lease id %q", l.FencingToken, l.LeaseID)
		}
		if l.Mode != lock.Exclusive || l.Limit != 0 || !strings.Contains(string(resp.Body), `"limit":0`) {
			t.Errorf("a plain lock's lease has mode %q and limit %d: %s", l.Mode, l.Limit, resp.Body)
		}
		if got, want := resp.Header.Get("Location"), "/v1/locks/deploy:prod/leases/"+l.LeaseID; got != want {
			t.Errorf("Location = %q, want %q", got, want)
		}
		acquired, err := time.Parse(time.RFC3339Nano, l.AcquiredAt)
		if err != nil || !strings.HasSuffix(l.AcquiredAt, "Z") {
			t.Fatalf("acquired_at %q: %v", l.AcquiredAt, err)
		}
		expires, _ := time.Parse(time.RFC3339Nano, l.ExpiresAt)
		if acquired.Before(before.Add(-time.Second)) || expires.Sub(acquired) != 45*time.Second {
			t.Errorf("acquired_at %s expires_at %s", l.AcquiredAt, l.ExpiresAt)
		}
		if st := e.State("deploy:prod"); !st.Held || st.Holder.Owner != "worker-7" || st.Holder.Token != l.FencingToken {
			t.Errorf("store state = %+v", st)
		}
	})

	t.Run("EmptyBodyGetsDefaults", func(t *testing.T) {
		e := MustOpenEnv(t, lockhttp.Config{})
		for _, tc := range []struct{ name, body, ct string }{
			{"NoBody", "", ""},
			{"EmptyObject", "{}", "application/json"},
			{"EmptyObjectCharset", "{}", "application/json; charset=utf-8"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				e := e.For(t)
				name := "defaults-" + tc.name
				var hdr []string
				if tc.ct != "" {
					hdr = []string{"Content-Type", tc.ct}
				}
				resp := e.Do("POST", "/v1/locks/"+name+"/leases", tc.body, hdr...)
				if resp.StatusCode != http.StatusCreated {
					t.Fatalf("status = %d; %s", resp.StatusCode, resp.Body)
				}
				l := Decode[lockhttp.Lease](t, resp)
				if l.TTLMs != 30000 || len(l.Owner) != 26 || l.Metadata == nil || len(l.Metadata) != 0 || l.Mode != lock.Exclusive || l.Limit != 0 {
					t.Errorf("lease = %+v", l)
				}
				if !strings.Contains(string(resp.Body), `"metadata":{}`) {
					t.Errorf("metadata not {}: %s", resp.Body)
				}
			})
		}
	})

	t.Run("GeneratedOwnerIsNeverReentrant", func(t *testing.T) {
		e := MustOpenEnv(t, lockhttp.Config{})
		e.Acquire("anon", "")
		WantProblem(t, e.Do("POST", "/v1/locks/anon/leases", ""), http.StatusConflict, "lock-held")
	})

	t.Run("ReentrantAcquire200", func(t *testing.T) {
		e := MustOpenEnv(t, lockhttp.Config{})
		first := e.Do("POST", "/v1/locks/re/leases", `{"owner":"me"}`)
		if first.StatusCode != http.StatusCreated {
			t.Fatalf("first status = %d", first.StatusCode)
		}
		second := e.Do("POST", "/v1/locks/re/leases", `{"owner":"me","ttl_ms":60000}`)
		if second.StatusCode != http.StatusOK {
			t.Fatalf("second status = %d, want 200", second.StatusCode)
		}
		a, b := Decode[lockhttp.Lease](t, first), Decode[lockhttp.Lease](t, second)
		if a.LeaseID != b.LeaseID || a.FencingToken != b.FencingToken || b.HoldCount != 2 || b.TTLMs != 60000 {
			t.Fatalf("first %+v, second %+v", a, b)
		}
		if second.Header.Get("Location") != first.Header.Get("Location") {
			t.Errorf("Location changed: %q, %q", first.Header.Get("Location"), second.Header.Get("Location"))
		}

		r1 := Decode[lockhttp.ReleaseResult](t, e.Do("DELETE", "/v1/locks/re/leases/"+a.LeaseID, ""))
		if r1.Released || r1.HoldCount != 1 {
			t.Fatalf("first release = %+v, want one hold left", r1)
		}
		if !e.State("re").Held {
			t.Fatal("lock freed after one of two releases")
		}
		r2 := Decode[lockhttp.ReleaseResult](t, e.Do("DELETE", "/v1/locks/re/leases/"+a.LeaseID, ""))
		if !r2.Released || r2.HoldCount != 0 {
			t.Fatalf("second release = %+v, want released", r2)
		}
		if e.State("re").Held {
			t.Fatal("lock still held after two releases")
		}
	})

	t.Run("IdempotencyKeyReplays", func(t *testing.T) {
		e := MustOpenEnv(t, lockhttp.Config{})
		key := []string{"Idempotency-Key", "01JD3Z8Q6W9M4T5R2K7X1B0C8N"}
		first := e.Do("POST", "/v1/locks/idem/leases", `{"owner":"me"}`, key...)
		if first.StatusCode != http.StatusCreated || first.Header.Get("Idempotent-Replayed") != "" {
			t.Fatalf("first: status %d, replayed %q", first.StatusCode, first.Header.Get("Idempotent-Replayed"))
		}
		retry := e.Do("POST", "/v1/locks/idem/leases", `{"owner":"me"}`, key...)
		if retry.StatusCode != http.StatusCreated || retry.Header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("retry: status %d (want the first answer's 201), replayed %q", retry.StatusCode, retry.Header.Get("Idempotent-Replayed"))
		}
		a, b := Decode[lockhttp.Lease](t, first), Decode[lockhttp.Lease](t, retry)
		if a.LeaseID != b.LeaseID || a.FencingToken != b.FencingToken || b.HoldCount != 1 {
			t.Fatalf("first %+v, retry %+v", a, b)
		}
		// One release frees it: the retry added no hold.
		if r := Decode[lockhttp.ReleaseResult](t, e.Do("DELETE", "/v1/locks/idem/leases/"+a.LeaseID, "")); !r.Released {
			t.Fatalf("release = %+v", r)
		}
	})

	t.Run("BadIdempotencyKey400", func(t *testing.T) {
		e := MustOpenEnv(t, lockhttp.Config{})
		for name, hdr := range map[string][]string{
			"space":    {"Idempotency-Key", "a b"},
			"long":     {"Idempotency-Key", strings.Repeat("k", 256)},
			"repeated": {"Idempotency-Key", "a", "Idempotency-Key", "b"},
		} {
			t.Run(name, func(t *testing.T) {
				resp := e.For(t).Malformed(t).Do("POST", "/v1/locks/idem-bad/leases", `{"owner":"me"}`, hdr...)
				WantProblem(t, resp, http.StatusBadRequest, "invalid-request")
				if e.State("idem-bad").Held {
					t.Fatal("a refused acquire changed the lock")
				}
			})
		}
	})

	// A fair waiter's queue place must be renewed within a second, which
	// makes it worth looking again sooner (Retry-After) but leaves the
	// holder's expiry (expires_in_ms) what it is.
	t.Run("HeldWithFairWaiter409", func(t *testing.T) {
		e := MustOpenEnv(t, lockhttp.Config{})
		holder := e.Acquire("busyq", `{"owner":"h","ttl_ms":30000}`)
		ctx, cancel := context.WithCancel(context.Background())
		waited := make(chan struct{})
		go func() {
			defer close(waited)
			e.send(ctx, "POST", "/v1/locks/busyq/leases", `{"owner":"q","fair":true,"wait_ms":60000}`)
		}()
		t.Cleanup(func() { cancel(); <-waited })
		for deadline := time.Now().Add(10 * time.Second); e.State("busyq").Queue != 1; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("the fair waiter never queued")
			}
		}
		resp := e.Do("POST", "/v1/locks/busyq/leases", `{"owner":"b"}`)
		p := WantProblem(t, resp, http.StatusConflict, "lock-held")
		if p.Holder == nil || p.Holder.Owner != "h" || p.Holder.FencingToken != holder.FencingToken || p.QueueLength == nil || *p.QueueLength != 1 {
			t.Fatalf("problem %+v holder %+v", p, p.Holder)
		}
		if p.Holder.ExpiresInMs < 20000 || p.Holder.ExpiresInMs > 30000 {
			t.Errorf("expires_in_ms = %d, want the holder's ~30 s lease", p.Holder.ExpiresInMs)
		}
		if ra := resp.Header.Get("Retry-After"); ra != "1" {
			t.Errorf("Retry-After = %q, want 1 (the queue head's renewal deadline)", ra)
		}
	})

	t.Run("HeldByOther409", func(t *testing.T) {
		e := MustOpenEnv(t, lockhttp.Config{})
		holder := e.Acquire("busy", `{"owner":"a","ttl_ms":2500}`)
		resp := e.Do("POST", "/v1/locks/busy/leases", `{"owner":"b"}`)
		p := WantProblem(t, resp, http.StatusConflict, "lock-held")
		if p.Holder == nil || p.Holder.Owner != "a" || p.Holder.FencingToken != holder.FencingToken {
			t.Fatalf("holder = %+v", p.Holder)
		}
		if p.Holder.ExpiresInMs <= 0 || p.Holder.ExpiresInMs > 2500 {
			t.Errorf("expires_in_ms = %d", p.Holder.ExpiresInMs)
		}
		if ra := resp.Header.Get("Retry-After"); ra != "3" {
			t.Errorf("Retry-After = %q, want 3 (2.5s rounded up)", ra)
		}
		if p.Instance != "/v1/locks/busy/leases" || p.Lock != "busy" || p.QueueLength == nil || *p.QueueLength != 0 {
			t.Errorf("instance = %q, lock %q, queue_length %v", p.Instance, p.Lock, p.QueueLength)
		}
	})

	t.Run("FreshGrantsGetLargerTokens", func(t *testing.T) {
		e := MustOpenEnv(t, lockhttp.Config{})
		var last uint64
		for i := range 3 {
			l := e.Acquire("fence", `{"owner":"o`+strconv.Itoa(i)+`"}`)
			if l.FencingToken <= last {
				t.Fatalf("token %d after %d", l.FencingToken, last)
			}
			last = l.FencingToken
			e.Do("DELETE", "/v1/locks/fence/leases/"+l.LeaseID, "")
		}
	})
}

func TestAcquire_Wait(t *testing.T) {
	t.Run("WokenByRelease201", func(t *testing.T) {
		e := MustOpenHookedEnv(t, lockhttp.Config{})
		holder := e.Acquire("q", `{"owner":"a","ttl_ms":600000}`)

		done := make(chan Response, 1)
		go func() {
			resp, err := e.send(context.Background(), "POST", "/v1/locks/q/leases", `{"owner":"b","wait_ms":60000}`)
			if err != nil {
				t.Error(err)
			}
			done <- resp
		}()
		if kind := Within(t, e.Hooks.Watching, "waiter registered"); kind != lock.WaitForRelease {
			t.Fatalf("watch kind %v", kind)
		}
		released := time.Now()
		e.Do("DELETE", "/v1/locks/q/leases/"+holder.LeaseID, "")

		resp := Within(t, done, "waiter answered")
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("waiter status = %d; %s", resp.StatusCode, resp.Body)
		}
		if d := time.Since(released); d > promptly {
			t.Errorf("waiter took %v after the release", d)
		}
		l := Decode[lockhttp.Lease](t, resp)
		if l.Owner != "b" || l.FencingToken <= holder.FencingToken {
			t.Errorf("waiter lease = %+v", l)
		}
	})

	t.Run("WaitRunsOut409", func(t *testing.T) {
		e := MustOpenEnv(t, lockhttp.Config{})
		e.Acquire("q", `{"owner":"a","ttl_ms":600000}`)
		start := time.Now()
		WantProblem(t, e.Do("POST", "/v1/locks/q/leases", `{"owner":"b","wait_ms":50}`), http.StatusConflict, "lock-held")
		if d := time.Since(start); d < 50*time.Millisecond {
			t.Errorf("answered after %v, before wait_ms", d)
		}
	})

	t.Run("LongWaitClampedToMaxWait", func(t *testing.T) {
		e := MustOpenEnv(t, lockhttp.Config{MaxWait: 100 * time.Millisecond})
		e.Acquire("q", `{"owner":"a","ttl_ms":600000}`)
		start := time.Now()
		WantProblem(t, e.Do("POST", "/v1/locks/q/leases", `{"owner":"b","wait_ms":9000000000000000000}`), http.StatusConflict, "lock-held")
		if d := time.Since(start); d < 100*time.Millisecond || d > promptly {
			t.Errorf("answered after %v, want about MaxWait", d)
		}
	})

	t.Run("ClientDisconnectStopsWaitAndHoldsNothing", func(t *testing.T) {
		e := MustOpenHookedEnv(t, lockhttp.Config{})
		holder := e.Acquire("q", `{"owner":"a","ttl_ms":600000}`)

		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			_, err := e.send(ctx, "POST", "/v1/locks/q/leases", `{"owner":"departed","wait_ms":60000}`)
			done <- err
		}()
		Within(t, e.Hooks.Watching, "waiter registered")
		cancel()
		if err := Within(t, done, "client returned"); !errors.Is(err, context.Canceled) {
			t.Fatalf("client error = %v, want context.Canceled", err)
		}
		// The server notices the disconnect and stops waiting, without a
		// release to wake it.
		Within(t, e.Hooks.Unwatched, "server stopped waiting")

		e.Do("DELETE", "/v1/locks/q/leases/"+holder.LeaseID, "")
		if st := e.State("q"); st.Held {
			t.Fatalf("lock held by %q after the holder released and the waiter left", st.Holder.Owner)
		}
		// And the next acquirer gets it at once.
		if l := e.Acquire("q", `{"owner":"c"}`); l.Owner != "c" {
			t.Fatalf("lease = %+v", l)
		}
	})
}

func TestRenew(t *testing.T) {
	e := MustOpenEnv(t, lockhttp.Config{})

	t.Run("NewTTL200", func(t *testing.T) {
		e := e.For(t)
		l := e.Acquire("renew-a", `{"owner":"a","ttl_ms":1000}`)
		resp := e.Do("POST", "/v1/locks/renew-a/leases/"+l.LeaseID+"/renew", `{"ttl_ms":120000}`)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status = %d; %s", resp.StatusCode, resp.Body)
		}
		r := Decode[lockhttp.Lease](t, resp)
		if r.LeaseID != l.LeaseID || r.FencingToken != l.FencingToken || r.TTLMs != 120000 || r.HoldCount != 1 {
			t.Fatalf("renewed = %+v, was %+v", r, l)
		}
		if r.ExpiresAt <= l.ExpiresAt {
			t.Errorf("expires_at %s not after %s", r.ExpiresAt, l.ExpiresAt)
		}
	})

	t.Run("NoBodyKeepsTTL200", func(t *testing.T) {
		e := e.For(t)
		l := e.Acquire("renew-b", `{"owner":"a","ttl_ms":5000}`)
		r := Decode[lockhttp.Lease](t, e.Do("POST", "/v1/locks/renew-b/leases/"+l.LeaseID+"/renew", ""))
		if r.TTLMs != 5000 {
			t.Fatalf("ttl_ms = %d, want 5000", r.TTLMs)
		}
	})

	t.Run("WrongLease410", func(t *testing.T) {
		e := e.For(t)
		e.Acquire("renew-c", `{"owner":"a"}`)
		p := WantProblem(t, e.Do("POST", "/v1/locks/renew-c/leases/01JD3Z8Q6W9M4T5R2K7X1B0C8N/renew", ""), http.StatusGone, "lease-lost")
		if !strings.Contains(p.Detail, "01JD3Z8Q6W9M4T5R2K7X1B0C8N") {
			t.Errorf("detail = %q", p.Detail)
		}
	})

	t.Run("AfterForceRelease410", func(t *testing.T) {
		e := e.For(t)
		l := e.Acquire("renew-d", `{"owner":"a"}`)
		e.Do("DELETE", "/v1/locks/renew-d", "")
		WantProblem(t, e.Do("POST", "/v1/locks/renew-d/leases/"+l.LeaseID+"/renew", ""), http.StatusGone, "lease-lost")
	})
}

func TestRelease(t *testing.T) {
	e := MustOpenEnv(t, lockhttp.Config{})

	t.Run("Released200", func(t *testing.T) {
		e := e.For(t)
		l := e.Acquire("rel-a", `{"owner":"a"}`)
		r := Decode[lockhttp.ReleaseResult](t, e.Do("DELETE", "/v1/locks/rel-a/leases/"+l.LeaseID, ""))
		if r != (lockhttp.ReleaseResult{Lock: "rel-a", LeaseID: l.LeaseID, HoldCount: 0, Released: true}) {
			t.Fatalf("result = %+v", r)
		}
		if e.State("rel-a").Held {
			t.Fatal("still held")
		}
	})

	t.Run("RetryOfFreeingReleaseIsIdempotent200", func(t *testing.T) {
		e := e.For(t)
		l := e.Acquire("rel-b", `{"owner":"a"}`)
		first := e.Do("DELETE", "/v1/locks/rel-b/leases/"+l.LeaseID, "")
		retry := e.Do("DELETE", "/v1/locks/rel-b/leases/"+l.LeaseID, "")
		if retry.StatusCode != http.StatusOK {
			t.Fatalf("retry status = %d; %s", retry.StatusCode, retry.Body)
		}
		if a, b := Decode[lockhttp.ReleaseResult](t, first), Decode[lockhttp.ReleaseResult](t, retry); a != b {
			t.Fatalf("retry answered %+v, first %+v", b, a)
		}
	})

	t.Run("AllDropsEveryHold200", func(t *testing.T) {
		e := e.For(t)
		l := e.Acquire("rel-c", `{"owner":"a"}`)
		e.Acquire("rel-c", `{"owner":"a"}`)
		e.Acquire("rel-c", `{"owner":"a"}`)
		r := Decode[lockhttp.ReleaseResult](t, e.Do("DELETE", "/v1/locks/rel-c/leases/"+l.LeaseID+"?all=true", ""))
		if !r.Released || r.HoldCount != 0 || e.State("rel-c").Held {
			t.Fatalf("result = %+v", r)
		}
	})

	t.Run("AllFalseDropsOne200", func(t *testing.T) {
		e := e.For(t)
		l := e.Acquire("rel-d", `{"owner":"a"}`)
		e.Acquire("rel-d", `{"owner":"a"}`)
		r := Decode[lockhttp.ReleaseResult](t, e.Do("DELETE", "/v1/locks/rel-d/leases/"+l.LeaseID+"?all=false", ""))
		if r.Released || r.HoldCount != 1 {
			t.Fatalf("result = %+v", r)
		}
	})

	t.Run("WrongLease410", func(t *testing.T) {
		e := e.For(t)
		e.Acquire("rel-e", `{"owner":"a"}`)
		WantProblem(t, e.Do("DELETE", "/v1/locks/rel-e/leases/01JD3Z8Q6W9M4T5R2K7X1B0C8N", ""), http.StatusGone, "lease-lost")
		if !e.State("rel-e").Held {
			t.Fatal("a wrong lease freed the lock")
		}
	})

	t.Run("SupersededLease410", func(t *testing.T) {
		e := e.For(t)
		old := e.Acquire("rel-f", `{"owner":"a"}`)
		e.Do("DELETE", "/v1/locks/rel-f", "")
		e.Acquire("rel-f", `{"owner":"b"}`)
		WantProblem(t, e.Do("DELETE", "/v1/locks/rel-f/leases/"+old.LeaseID, ""), http.StatusGone, "lease-lost")
		if st := e.State("rel-f"); !st.Held || st.Holder.Owner != "b" {
			t.Fatalf("state = %+v", st)
		}
	})
}
