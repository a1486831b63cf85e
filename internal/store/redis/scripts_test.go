package redis

import (
	"context"
	"testing"

	"github.com/lockapi/lockapi/internal/testkit/redistest"
)

// TestScripts_pinned pins the library of scripts (lib.lua and every entry
// point, see runner.go) by its name, which is a hash of its code, so that
// an edit cannot drift silently: a changed script must change this table in
// the same commit, and deployments running two versions side by side can
// see that they differ. Redis must load the library, and each entry point
// in its EVAL form (for Redis 6.2).
func TestScripts_pinned(t *testing.T) {
	pinned := []struct {
		name      string
		crossSlot bool
		lib       string
	}{
		{"plain", false, "lockapi_4bde80c35d98332f"},
		{"cluster", true, "lockapi_3344ef898c7db0b9"},
	}
	rdb := redistest.Start(t).Client(t)
	for _, p := range pinned {
		t.Run(p.name, func(t *testing.T) {
			set := newScriptSet(p.crossSlot)
			if got := set.lib.name; got != p.lib {
				t.Errorf("library = %s, pinned %s: update the pin if the change is intended", got, p.lib)
			}
			if err := set.lib.load(context.Background(), rdb); err != nil {
				t.Fatalf("Redis refused the library: %v", err)
			}
			for _, s := range set.lib.funcs {
				if _, err := s.eval.Load(context.Background(), rdb).Result(); err != nil {
					t.Errorf("Redis refused %s as a script: %v", s.fn, err)
				}
			}
		})
	}
}

// TestKeys_share_one_cluster_slot checks that a lock's keys hash to one Redis
// Cluster slot, whatever the name and prefix, so its scripts never meet
// CROSSSLOT.
func TestKeys_share_one_cluster_slot(t *testing.T) {
	for _, prefix := range []string{"lockapi:", "team:a:", "x"} {
		s := scriptKeys{keyspace: keyspace{prefix}}
		for _, name := range []string{"a", "deploy:prod", "payments:orders:42", "x.y_z@w~v-1"} {
			want := clusterSlot("{" + name + "}")
			for _, key := range s.keys(name) {
				if got := clusterSlot(key); got != want {
					t.Errorf("prefix %q name %q: key %q is in slot %d, not %d", prefix, name, key, got, want)
				}
			}
		}
	}
	if _, err := New(nil, Options{Prefix: "bad{"}); err == nil {
		t.Error("a prefix with a brace was accepted")
	}
}
