package client

import (
	"errors"
	"net/http"
	"testing"
)

// A 429 rate-limited passes with time; a 429 quota-exceeded does not, so
// it is not ErrUnavailable, which callers retry.
func TestProblem_quota_is_not_transient(t *testing.T) {
	for _, c := range []struct {
		slug      string
		transient bool
	}{{"rate-limited", true}, {"quota-exceeded", false}} {
		resp := &http.Response{StatusCode: http.StatusTooManyRequests, Header: http.Header{"Content-Type": {"application/problem+json"}}}
		err := responseError("", resp, []byte(`{"type":"`+problemTypeBase+c.slug+`","title":"t","status":429}`))
		if got := errors.Is(err, ErrUnavailable); got != c.transient {
			t.Errorf("%s: errors.Is(err, ErrUnavailable) = %v, want %v (%v)", c.slug, got, c.transient, err)
		}
	}
}
