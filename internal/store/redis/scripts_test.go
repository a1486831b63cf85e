package redis

import (
	"context"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/lockapi/lockapi/internal/testkit/redistest"
)

// TestScripts_pinned pins every script's SHA-1, so that an edit cannot drift
// silently: a changed script must change this table in the same commit, and
// deployments running two versions side by side can see that they differ.
// Redis itself must compute the same hash when it loads the script.
func TestScripts_pinned(t *testing.T) {
	pinned := []struct {
		name   string
		script *goredis.Script
		sha    string
	}{
		{"acquire.lua", plainScripts.acquire, "03f86209f95060276294062e629d23397379e895"},
		{"renew.lua", plainScripts.renew, "bd72d6abc2c27f3c01b47af41e246e58346f7f63"},
		{"release.lua", plainScripts.release, "057f7709f9630062ac75ef1afd1d7f1e0636241d"},
		{"force_release.lua", plainScripts.forceRelease, "565a47bf0e158421f83d3b0630f67b390eeefe10"},
		{"inspect.lua", plainScripts.inspect, "77d245a34d7a150b359e2915a53512b3a3fb3e96"},
		{"abandon.lua", plainScripts.abandon, "bb1da827f89d9136ae2277870bea62cb0aaaa3e5"},
		{"leave.lua", plainScripts.leave, "ec8837f84bc01843ff2198d86b151442e1d4488b"},
		{"expire.lua", plainScripts.expire, "361749c8add5957d2c6ad181a21dc785fc26d61e"},
	}
	rdb := redistest.Start(t).Client(t)
	for _, p := range pinned {
		t.Run(p.name, func(t *testing.T) {
			if got := p.script.Hash(); got != p.sha {
				t.Errorf("hash = %s, pinned %s: update the pin if the change is intended", got, p.sha)
			}
			loaded, err := p.script.Load(context.Background(), rdb).Result()
			if err != nil {
				t.Fatalf("Redis refused the script: %v", err)
			}
			if loaded != p.sha {
				t.Errorf("Redis hashed it as %s, pinned %s", loaded, p.sha)
			}
		})
	}
}

// TestKeys_share_one_cluster_slot checks that a lock's keys hash to one Redis
// Cluster slot, whatever the name and prefix, so its scripts never meet
// CROSSSLOT.
func TestKeys_share_one_cluster_slot(t *testing.T) {
	for _, prefix := range []string{"lockapi:", "team:a:", "x"} {
		s := &Store{keyspace: keyspace{prefix}}
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
