package redis

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/lockapi/lockapi/internal/lock"
)

// replyReader reads a script's array reply by position. The first malformed
// element is kept in err: a malformed reply is a bug, not bad input.
type replyReader struct {
	v   []any
	err error
}

func reply(v []any) *replyReader { return &replyReader{v: v} }

func (r *replyReader) fail(i int, what string) {
	if r.err == nil {
		r.err = &lock.Error{Code: lock.CodeInternal, Detail: "internal error",
			Err: fmt.Errorf("store: script reply element %d: %s (%#v)", i, what, r.v)}
	}
}

func (r *replyReader) str(i int) string {
	if i >= len(r.v) || r.v[i] == nil {
		return ""
	}
	switch x := r.v[i].(type) {
	case string:
		return x
	case int64:
		return strconv.FormatInt(x, 10)
	}
	r.fail(i, "not a string")
	return ""
}

func (r *replyReader) int(i int) int64 {
	if i >= len(r.v) || r.v[i] == nil {
		return 0
	}
	switch x := r.v[i].(type) {
	case int64:
		return x
	case string:
		n, err := strconv.ParseInt(x, 10, 64)
		if err == nil {
			return n
		}
	}
	r.fail(i, "not an integer")
	return 0
}

func (r *replyReader) uint(i int) uint64 {
	n := r.int(i)
	if n < 0 {
		r.fail(i, "negative")
		return 0
	}
	return uint64(n)
}

func (r *replyReader) millis(i int) time.Time {
	return time.UnixMilli(r.int(i)).UTC()
}

func (r *replyReader) metadata(i int) map[string]string {
	s := r.str(i)
	if s == "" || s == "{}" {
		return nil
	}
	var md map[string]string
	if err := json.Unmarshal([]byte(s), &md); err != nil {
		r.fail(i, "metadata is not a JSON object of strings")
	}
	return md
}

// lease reads the lease fields that acquire.lua and renew.lua return from
// position i on: lease id, owner, principal, token, hold count, ttl ms,
// acquired ms, expires ms, metadata.
func (r *replyReader) lease(name string, i int) lock.Lease {
	return lock.Lease{
		Lock:       name,
		ID:         r.str(i),
		Owner:      r.str(i + 1),
		Principal:  r.str(i + 2),
		Token:      r.uint(i + 3),
		HoldCount:  int(r.int(i + 4)),
		TTL:        time.Duration(r.int(i+5)) * time.Millisecond,
		AcquiredAt: r.millis(i + 6),
		ExpiresAt:  r.millis(i + 7),
		Metadata:   r.metadata(i + 8),
	}
}
