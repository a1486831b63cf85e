package http_test

import (
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/lockapi/lockapi/internal/auth"
	lockhttp "github.com/lockapi/lockapi/internal/http"
	"github.com/lockapi/lockapi/internal/lock"
)

// CreateSession starts a session with body and fails the test unless it is
// created.
func (e *Env) CreateSession(body string, header ...string) lockhttp.Session {
	e.t.Helper()
	resp := e.Do("POST", "/v1/sessions", body, header...)
	if resp.StatusCode != http.StatusCreated {
		e.t.Fatalf("create session %s: %d %s", body, resp.StatusCode, resp.Body)
	}
	sess := Decode[lockhttp.Session](e.t, resp)
	if loc := resp.Header.Get("Location"); loc != "/v1/sessions/"+sess.SessionID {
		e.t.Fatalf("Location = %q for session %s", loc, sess.SessionID)
	}
	return sess
}

func TestSessions(t *testing.T) {
	e := MustOpenEnv(t, lockhttp.Config{})

	t.Run("Defaults", func(t *testing.T) {
		e := e.For(t)
		sess := e.CreateSession("")
		if sess.TTLMs != lock.DefaultSessionTTL.Milliseconds() || sess.LockDelayMs != 0 || len(sess.Owner) != 26 || len(sess.Leases) != 0 {
			t.Fatalf("session %+v", sess)
		}
	})

	t.Run("BindRenewDelete", func(t *testing.T) {
		e := e.For(t)
		sess := e.CreateSession(`{"owner":"worker-7","ttl_ms":5000,"lock_delay_ms":2000}`)
		excl := e.Acquire("s:excl", `{"owner":"w","session":"`+sess.SessionID+`"}`)
		if excl.Session != sess.SessionID || excl.ExpiresAt != sess.ExpiresAt || excl.TTLMs != 5000 {
			t.Fatalf("bound lease %+v of session %+v", excl, sess)
		}
		leases := e.AcquireAll(`{"locks":["s:m1","s:m2"],"owner":"w","session":"` + sess.SessionID + `"}`)
		for _, l := range leases {
			if l.Session != sess.SessionID {
				t.Fatalf("multi-lock lease %+v is not bound", l)
			}
		}
		st := Decode[lockhttp.LockState](t, e.Do("GET", "/v1/locks/s:excl", ""))
		if st.Holder == nil || st.Holder.Session != sess.SessionID {
			t.Fatalf("state %+v does not name the session", st)
		}

		renewed := Decode[lockhttp.Session](t, e.Do("POST", "/v1/sessions/"+sess.SessionID+"/renew", `{"ttl_ms":60000}`))
		if renewed.TTLMs != 60000 || len(renewed.Leases) != 3 || renewed.Leases[0].Lock != "s:excl" {
			t.Fatalf("renewed %+v", renewed)
		}
		got := Decode[lockhttp.Session](t, e.Do("GET", "/v1/sessions/"+sess.SessionID, ""))
		if got.ExpiresAt != renewed.ExpiresAt || len(got.Leases) != 3 {
			t.Fatalf("got %+v after renewal %+v", got, renewed)
		}

		ended := Decode[lockhttp.Session](t, e.Do("DELETE", "/v1/sessions/"+sess.SessionID, ""))
		if len(ended.Leases) != 3 {
			t.Fatalf("ended %+v", ended)
		}
		// Clean releases: no lock-delay.
		for _, name := range []string{"s:excl", "s:m1", "s:m2"} {
			e.Acquire(name, `{"owner":"next"}`)
		}
		WantProblem(t, e.Do("POST", "/v1/sessions/"+sess.SessionID+"/renew", ""), http.StatusGone, "session-lost")
		WantProblem(t, e.Do("GET", "/v1/sessions/"+sess.SessionID, ""), http.StatusGone, "session-lost")
		WantProblem(t, e.Do("POST", "/v1/locks/s:late/leases", `{"session":"`+sess.SessionID+`"}`), http.StatusGone, "session-lost")
	})

	t.Run("LockDelay409WithRetryAfter", func(t *testing.T) {
		e := e.For(t)
		sess := e.CreateSession(`{"lock_delay_ms":3000}`)
		e.Acquire("s:delay", `{"session":"`+sess.SessionID+`"}`)
		if resp := e.Do("DELETE", "/v1/locks/s:delay", ""); resp.StatusCode != http.StatusOK {
			t.Fatalf("force release: %d %s", resp.StatusCode, resp.Body)
		}
		resp := e.Do("POST", "/v1/locks/s:delay/leases", `{"owner":"next"}`)
		p := WantProblem(t, resp, http.StatusConflict, "lock-delay")
		if p.Lock != "s:delay" || p.LockDelayRemainingMs < 1 || p.LockDelayRemainingMs > 3000 {
			t.Errorf("problem %+v does not name the lock and what is left of the delay", p)
		}
		if secs, err := strconv.Atoi(resp.Header.Get("Retry-After")); err != nil || secs < 1 || secs > 3 {
			t.Fatalf("Retry-After = %q", resp.Header.Get("Retry-After"))
		}
		// The state and the list show the delay of the free lock.
		st := Decode[lockhttp.LockState](t, e.Do("GET", "/v1/locks/s:delay", ""))
		if st.Held || st.LockDelayRemainingMs < 1 || st.LockDelayRemainingMs > 3000 {
			t.Fatalf("state during the lock-delay = %+v", st)
		}
		list := Decode[lockhttp.LockList](t, e.Do("GET", "/v1/locks?prefix=s:delay", ""))
		if len(list.Locks) != 1 || list.Locks[0].Lock != "s:delay" || list.Locks[0].LockDelayRemainingMs < 1 {
			t.Fatalf("list during the lock-delay = %+v", list)
		}
		// None on a lock without a delay: the member is absent.
		e.Acquire("s:open", `{}`)
		if body := e.Do("GET", "/v1/locks/s:open", "").Body; strings.Contains(string(body), "lock_delay") {
			t.Fatalf("state of a lock without a delay: %s", body)
		}
	})

	t.Run("BlockingQuery", func(t *testing.T) {
		e := e.For(t)
		sess := e.CreateSession(`{"ttl_ms":30000}`)
		e.Acquire("s:bq", `{"session":"`+sess.SessionID+`"}`)
		path := "/v1/sessions/" + sess.SessionID
		got := Decode[lockhttp.Session](t, e.Do("GET", path, ""))
		renewed := Decode[lockhttp.Session](t, e.Do("POST", path+"/renew", ""))
		if got.Index == "" || got.Index == sess.Index || renewed.Index != got.Index {
			t.Fatalf("index %q of a new session, %q with a lease, %q renewed", sess.Index, got.Index, renewed.Index)
		}
		if same := Decode[lockhttp.Session](t, e.Do("GET", path+"?index="+got.Index+"&wait_ms=30", "")); same.Index != got.Index {
			t.Fatalf("a wait with nothing changed answered %+v", same)
		}
		answers := make(chan Response, 1)
		go func() { answers <- e.Do("GET", path+"?index="+got.Index+"&wait_ms=20000", "") }()
		if resp := e.Do("DELETE", "/v1/locks/s:bq", ""); resp.StatusCode != http.StatusOK {
			t.Fatalf("force release: %d %s", resp.StatusCode, resp.Body)
		}
		after := Decode[lockhttp.Session](t, Within(t, answers, "the blocking query after a force release"))
		if len(after.Leases) != 0 || after.Index == got.Index {
			t.Fatalf("answer after the force release: %+v", after)
		}
		go func() { answers <- e.Do("GET", path+"?index="+after.Index, "") }()
		e.Do("DELETE", path, "")
		WantProblem(t, Within(t, answers, "the blocking query after the session's end"), http.StatusGone, "session-lost")
	})

	t.Run("BadInput400ChangesNothing", func(t *testing.T) {
		e := e.Malformed(t)
		sess := e.CreateSession("")
		for _, c := range []struct{ method, path, body, field string }{
			{"POST", "/v1/locks/s:bad/leases", `{"session":"` + sess.SessionID + `","ttl_ms":1000}`, "ttl_ms"},
			{"POST", "/v1/leases", `{"locks":["s:bad"],"session":"` + sess.SessionID + `","ttl_ms":1000}`, "ttl_ms"},
			{"POST", "/v1/locks/s:bad/leases", `{"session":"not-a-session"}`, "session"},
			{"POST", "/v1/locks/s:bad/leases", `{"session":""}`, "session"},
			{"POST", "/v1/sessions", `{"lock_delay_ms":-1}`, "lock_delay_ms"},
			{"POST", "/v1/sessions", `{"lock_delay_ms":99999999999}`, "lock_delay_ms"},
			{"POST", "/v1/sessions", `{"ttl_ms":10}`, "ttl_ms"},
			{"POST", "/v1/sessions", `{"ttl_ms":86400000}`, "ttl_ms"},
			{"GET", "/v1/sessions/xyz", "", "id"},
			{"GET", "/v1/sessions/" + sess.SessionID + "?index=x&wait_ms=-1", "", "wait_ms"},
			{"POST", "/v1/sessions/" + strings.ToLower(sess.SessionID) + "/renew", "", "id"},
			{"POST", "/v1/sessions/" + sess.SessionID + "/renew", `{"ttl_ms":1}`, "ttl_ms"},
		} {
			p := WantProblem(t, e.Do(c.method, c.path, c.body), http.StatusBadRequest, "invalid-request")
			if len(p.Errors) == 0 || p.Errors[0].Field != c.field {
				t.Errorf("%s %s %s: errors %+v, want %s", c.method, c.path, c.body, p.Errors, c.field)
			}
		}
		if st := e.State("s:bad"); st.Held || st.LastToken != 0 {
			t.Fatalf("refused acquires changed the lock: %+v", st)
		}
		if got := Decode[lockhttp.Session](t, e.Do("GET", "/v1/sessions/"+sess.SessionID, "")); got.ExpiresAt != sess.ExpiresAt {
			t.Fatalf("a refused renewal changed the session: %+v", got)
		}
	})

	t.Run("UnknownSession404", func(t *testing.T) {
		e := e.For(t)
		const id = "01JD3Z8Q6W9M4T5R2K7X1B0C9S"
		WantProblem(t, e.Do("POST", "/v1/locks/s:unknown/leases", `{"session":"`+id+`"}`), http.StatusNotFound, "session-not-found")
		WantProblem(t, e.Do("GET", "/v1/sessions/"+id, ""), http.StatusNotFound, "session-not-found")
		WantProblem(t, e.Do("DELETE", "/v1/sessions/"+id, ""), http.StatusNotFound, "session-not-found")
		if st := e.State("s:unknown"); st.Held || st.LastToken != 0 {
			t.Fatalf("a refused acquire changed the lock: %+v", st)
		}
	})
}

func TestSessions_principals(t *testing.T) {
	e, as := MustOpenKeyedEnv(t,
		KeySpec{"team-a", []auth.Scope{auth.ScopeRead, auth.ScopeWrite}, []string{"*"}},
		KeySpec{"team-b", []auth.Scope{auth.ScopeRead, auth.ScopeWrite}, []string{"*"}},
		KeySpec{"ops", []auth.Scope{auth.ScopeAdmin}, []string{"*"}})
	asA, asB, asAdmin := as[0], as[1], as[2]

	sess := e.CreateSession(`{"owner":"worker-a"}`, asA...)
	path := "/v1/sessions/" + sess.SessionID
	WantProblem(t, e.Do("GET", path, "", asB...), http.StatusNotFound, "session-not-found")
	WantProblem(t, e.Do("POST", path+"/renew", "", asB...), http.StatusNotFound, "session-not-found")
	WantProblem(t, e.Do("DELETE", path, "", asB...), http.StatusNotFound, "session-not-found")
	WantProblem(t, e.Do("POST", "/v1/locks/p:1/leases", `{"session":"`+sess.SessionID+`"}`, asB...), http.StatusNotFound, "session-not-found")
	if list := Decode[lockhttp.SessionList](t, e.Do("GET", "/v1/sessions", "", asB...)); len(list.Sessions) != 0 {
		t.Fatalf("team-b lists %+v", list)
	}
	if list := Decode[lockhttp.SessionList](t, e.Do("GET", "/v1/sessions?owner_prefix=worker-", "", asAdmin...)); len(list.Sessions) != 1 || list.Sessions[0].SessionID != sess.SessionID {
		t.Fatalf("the admin lists %+v", list)
	}
}

// An admin limited by patterns reaches another principal's session only
// when its patterns cover that principal and every lock the session holds:
// else the session is not found to it, as to any other principal, and
// neither its lock nor its lock-delay can be turned against its owner.
func TestSessions_patternLimitedAdmin(t *testing.T) {
	e, as := MustOpenKeyedEnv(t,
		KeySpec{"team-b", []auth.Scope{auth.ScopeRead, auth.ScopeWrite}, []string{"team-b:*"}},
		KeySpec{"admin-a", []auth.Scope{auth.ScopeAdmin}, []string{"team-a:*"}},
		KeySpec{"admin-b", []auth.Scope{auth.ScopeAdmin}, []string{"team-b*"}})
	asB, asAdminA, asAdminB := as[0], as[1], as[2]

	sess := e.CreateSession(`{"owner":"worker-b","lock_delay_ms":60000}`, asB...)
	path := "/v1/sessions/" + sess.SessionID
	if resp := e.Do("POST", "/v1/locks/team-b:secret-bound/leases", `{"session":"`+sess.SessionID+`"}`, asB...); resp.StatusCode != http.StatusCreated {
		t.Fatalf("bind: %d %s", resp.StatusCode, resp.Body)
	}

	WantProblem(t, e.Do("GET", path, "", asAdminA...), http.StatusNotFound, "session-not-found")
	WantProblem(t, e.Do("POST", path+"/renew", `{"ttl_ms":100}`, asAdminA...), http.StatusNotFound, "session-not-found")
	WantProblem(t, e.Do("DELETE", path, "", asAdminA...), http.StatusNotFound, "session-not-found")
	if list := Decode[lockhttp.SessionList](t, e.Do("GET", "/v1/sessions", "", asAdminA...)); len(list.Sessions) != 0 {
		t.Fatalf("admin-a lists %+v", list)
	}
	if st := e.State("team-b:secret-bound"); !st.Held {
		t.Fatalf("team-b's lock after admin-a's tries: %+v", st)
	}
	if got := Decode[lockhttp.Session](t, e.Do("GET", path, "", asB...)); got.TTLMs != sess.TTLMs {
		t.Fatalf("admin-a changed the session's TTL: %+v", got)
	}

	// An admin whose patterns cover the principal and the lock reaches it.
	if list := Decode[lockhttp.SessionList](t, e.Do("GET", "/v1/sessions", "", asAdminB...)); len(list.Sessions) != 1 || list.Sessions[0].SessionID != sess.SessionID {
		t.Fatalf("admin-b lists %+v", list)
	}
	if resp := e.Do("DELETE", path, "", asAdminB...); resp.StatusCode != http.StatusOK {
		t.Fatalf("admin-b ends the session: %d %s", resp.StatusCode, resp.Body)
	}
}

// A store that declares no sessions answers every session route, and an
// acquire naming a session, 501 unsupported.
func TestSessions_unsupported(t *testing.T) {
	e := MustOpenEnv(t, lockhttp.Config{})
	e.Hooks.NoSessions = true
	const id = "01JD3Z8Q6W9M4T5R2K7X1B0C9S"
	WantProblem(t, e.Do("POST", "/v1/sessions", ""), http.StatusNotImplemented, "unsupported")
	WantProblem(t, e.Do("GET", "/v1/sessions", ""), http.StatusNotImplemented, "unsupported")
	WantProblem(t, e.Do("GET", "/v1/sessions/"+id, ""), http.StatusNotImplemented, "unsupported")
	WantProblem(t, e.Do("POST", "/v1/sessions/"+id+"/renew", ""), http.StatusNotImplemented, "unsupported")
	WantProblem(t, e.Do("DELETE", "/v1/sessions/"+id, ""), http.StatusNotImplemented, "unsupported")
	WantProblem(t, e.Do("POST", "/v1/locks/u:1/leases", `{"session":"`+id+`"}`), http.StatusNotImplemented, "unsupported")
	if st := e.State("u:1"); st.Held || st.LastToken != 0 {
		t.Fatalf("a refused acquire changed the lock: %+v", st)
	}
}
