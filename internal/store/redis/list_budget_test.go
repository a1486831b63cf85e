package redis_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lockapi/lockapi/internal/lock"
	redisstore "github.com/lockapi/lockapi/internal/store/redis"
	"github.com/lockapi/lockapi/internal/testkit/redistest"
	"github.com/lockapi/lockapi/internal/testkit/storetest"
)

// TestRedis_list_walks_a_budget_per_page: an admin whose patterns cover a
// few names among thousands gets each page after a bounded walk (at most
// the budget of SCAN batches), with a cursor while the keyspace is not
// done, and paging to the end finds exactly the names it may see. Before,
// a page walked on until it had Limit visible names: here the whole
// keyspace in one call (on a large one, until the call timed out).
func TestRedis_list_walks_a_budget_per_page(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	c, err := redisstore.NewClient(redisstore.ClientConfig{URL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	s, err := redisstore.New(c, redisstore.Options{Prefix: "lb:"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	const budget = 2
	redisstore.SetListBatches(s, budget)

	// Thousands of keys of names the admin may not see: SCAN reads key
	// names only, so plain keys stand for held locks.
	var fill []any
	for i := range 3000 {
		fill = append(fill, fmt.Sprintf("lb:{team-b:%04d}:lock", i), "x")
	}
	if err := rdb.MSet(ctx, fill...).Err(); err != nil {
		t.Fatal(err)
	}
	var want []string
	for i := range 5 {
		name := fmt.Sprintf("team-a:%d", i)
		storetest.Acquire(t, s, name, "w", time.Minute)
		want = append(want, name)
	}
	visible := func(name string) bool { return strings.HasPrefix(name, "team-a:") }

	var seen []string
	pages := 0
	for cursor := ""; pages == 0 || cursor != ""; pages++ {
		if pages > 1000 {
			t.Fatal("listing does not end")
		}
		before := commandCalls(t, rdb)
		page, err := s.List(ctx, lock.ListRequest{Limit: 100, Cursor: cursor, Visible: visible})
		if err != nil {
			t.Fatal(err)
		}
		if scans := commandsSince(t, rdb, before)["scan"]; scans > budget {
			t.Fatalf("page %d ran %d SCAN batches, budget %d", pages, scans, budget)
		}
		for _, st := range page.Locks {
			seen = append(seen, st.Lock)
		}
		cursor = page.NextCursor
	}
	slices.Sort(seen)
	if fmt.Sprint(seen) != fmt.Sprint(want) {
		t.Fatalf("listed %v, want %v", seen, want)
	}
	if pages < 2 {
		t.Fatalf("%d page for 3,005 keys at %d batches of 100 a page", pages, budget)
	}
}
