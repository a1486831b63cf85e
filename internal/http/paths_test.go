package http_test

import (
	"net/http"
	"testing"

	lockhttp "github.com/lockapi/lockapi/internal/http"
)

// TestPathParams_DecodedOnce: a path parameter is percent-decoded exactly
// once, so two spellings of one name never reach one lock. "%253A" is the
// encoding of "%3A", whose "%" no lock name may hold; decoding it again
// would make it ":".
func TestPathParams_DecodedOnce(t *testing.T) {
	e := MustOpenEnv(t, lockhttp.Config{})

	t.Run("EncodedOnceIsTheName", func(t *testing.T) {
		e := e.For(t)
		resp := e.Do("POST", "/v1/locks/enc%3Aok/leases", `{"owner":"a"}`)
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("status = %d; %s", resp.StatusCode, resp.Body)
		}
		if l := Decode[lockhttp.Lease](t, resp); l.Lock != "enc:ok" {
			t.Fatalf("lock = %q, want enc:ok", l.Lock)
		}
		if st := Decode[lockhttp.LockState](t, e.Do("GET", "/v1/locks/enc%3Aok", "")); st.Lock != "enc:ok" || !st.Held {
			t.Fatalf("state = %+v", st)
		}
	})

	t.Run("ErrInspectEncodedTwice400", func(t *testing.T) {
		e := e.Malformed(t)
		e.Acquire("dbl:test", `{"owner":"a"}`)
		p := WantProblem(t, e.Do("GET", "/v1/locks/dbl%253Atest", ""), http.StatusBadRequest, "invalid-request")
		if len(p.Errors) != 1 || p.Errors[0].Field != "name" {
			t.Fatalf("errors = %+v, want one naming name", p.Errors)
		}
	})

	t.Run("ErrAcquireEncodedTwice400", func(t *testing.T) {
		e := e.Malformed(t)
		WantProblem(t, e.Do("POST", "/v1/locks/dbl2%253Atest/leases", `{"owner":"a"}`), http.StatusBadRequest, "invalid-request")
		if e.State("dbl2:test").Held {
			t.Fatal("a name encoded twice took the lock it decodes to twice")
		}
	})

	t.Run("ErrWebhookIDEncodedTwice400", func(t *testing.T) {
		e := e.Malformed(t)
		// "a%252D" is "a%2D" decoded once, "a-" decoded twice.
		p := WantProblem(t, e.Do("GET", "/v1/webhooks/a%252D", ""), http.StatusBadRequest, "invalid-request")
		if len(p.Errors) != 1 || p.Errors[0].Field != "id" {
			t.Fatalf("errors = %+v, want one naming id", p.Errors)
		}
	})
}
