package redis_test

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/lockapi/lockapi/internal/lock"
	redisstore "github.com/lockapi/lockapi/internal/store/redis"
	"github.com/lockapi/lockapi/internal/testkit/redistest"
)

// TestUpdate_event_in_both_layouts: an updated event carries its metadata
// in the entry's field md, beside e in the packed layout and beside the
// fields of the field-per-field one (Options.EventsByField), and reads the
// same from either; "" is an update that removed every label.
func TestUpdate_event_in_both_layouts(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	prefix := newPrefix()
	packed := openEvents(t, srv, prefix)
	byField := openEvents(t, srv, prefix, func(o *redisstore.Options) { o.EventsByField = true })
	g := acquire(t, packed, lock.AcquireRequest{Lock: "svc:leader", Owner: "node-a", Principal: "ops"})
	ref := lock.LeaseRef{Lock: "svc:leader", ID: g.Lease.ID}
	md := map[string]string{"addr": "10.0.0.7:9000", "note": "two\nlines"}
	if _, err := packed.Update(ctx, ref, md); err != nil {
		t.Fatal(err)
	}
	if _, err := byField.Update(ctx, ref, nil); err != nil {
		t.Fatal(err)
	}

	evs := readAll(t, packed, "")
	if len(evs) != 3 || evs[1].Type != lock.EventUpdated || evs[2].Type != lock.EventUpdated {
		t.Fatalf("events %+v", evs)
	}
	if !maps.Equal(evs[1].Metadata, md) || evs[2].Metadata == nil || len(evs[2].Metadata) != 0 || evs[0].Metadata != nil {
		t.Fatalf("metadata %v, %v, %v", evs[0].Metadata, evs[1].Metadata, evs[2].Metadata)
	}
	for _, e := range evs[1:] {
		if e.Owner != "node-a" || e.Principal != "ops" || e.Token != g.Lease.Token || e.HoldCount != 1 || e.LeaseID != g.Lease.ID {
			t.Fatalf("updated event %+v", e)
		}
	}
	entries, err := srv.Client(t).XRange(ctx, prefix+"events", "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	var layouts []string
	for _, m := range entries {
		layouts = append(layouts, strings.Join(slices.Sorted(maps.Keys(m.Values)), ","))
	}
	if want := []string{"e,v", "e,md,v", "h,k,l,m,md,n,o,p,q,s,t"}; !slices.Equal(layouts, want) {
		t.Errorf("stream entries' fields %v, want %v", layouts, want)
	}
}
