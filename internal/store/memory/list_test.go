package memory_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"testing"
	"time"

	"github.com/lockapi/lockapi/internal/lock"
	"github.com/lockapi/lockapi/internal/testkit/storetest"
)

// A list cursor is sealed: only one this store made, unaltered, resumes a
// listing; a cursor that names a lock in the clear, one altered in any
// byte, or one of another store is refused.
func TestList_cursor_is_sealed(t *testing.T) {
	ctx := context.Background()
	s, other := open(t), open(t)
	for _, name := range []string{"c:1", "c:2", "c:3"} {
		storetest.Acquire(t, s, name, "w", time.Minute)
		storetest.Acquire(t, other, name, "w", time.Minute)
	}
	page, err := s.List(ctx, lock.ListRequest{Limit: 1})
	if err != nil || page.NextCursor == "" {
		t.Fatalf("first page %+v, %v", page, err)
	}
	if next, err := s.List(ctx, lock.ListRequest{Limit: 1, Cursor: page.NextCursor}); err != nil || len(next.Locks) != 1 || next.Locks[0].Lock != "c:2" {
		t.Fatalf("second page %+v, %v", next, err)
	}

	raw, err := base64.RawURLEncoding.DecodeString(page.NextCursor)
	if err != nil {
		t.Fatal(err)
	}
	otherPage, err := other.List(ctx, lock.ListRequest{Limit: 1})
	if err != nil || otherPage.NextCursor == "" {
		t.Fatalf("first page of the other store %+v, %v", otherPage, err)
	}
	bad := map[string]string{
		"plain name":    base64.RawURLEncoding.EncodeToString([]byte("c:1")),
		"another store": otherPage.NextCursor,
	}
	for i := range raw {
		b := append([]byte(nil), raw...)
		b[i] ^= 1
		bad[fmt.Sprintf("byte %d altered", i)] = base64.RawURLEncoding.EncodeToString(b)
	}
	for what, cursor := range bad {
		_, err := s.List(ctx, lock.ListRequest{Limit: 1, Cursor: cursor})
		if lock.ErrorCode(err) != lock.CodeInvalid {
			t.Errorf("%s: %v, want invalid", what, err)
		}
	}
}
