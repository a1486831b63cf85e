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
		{"acquire.lua", plainScripts.acquire, "e438b8ed7bea20547f38ccc1c686e1b257e6a488"},
		{"renew.lua", plainScripts.renew, "5d145e0ef535e90c1a8402d6d55592df28fd210c"},
		{"release.lua", plainScripts.release, "b7a5dc2597f7973dfb7489030f0ed8534bf281d0"},
		{"force_release.lua", plainScripts.forceRelease, "8c8871e4d1a0496806a372643aad9b4ca7143567"},
		{"inspect.lua", plainScripts.inspect, "17b9915ddb2b07a7841fee36d36d4585837a0ab6"},
		{"abandon.lua", plainScripts.abandon, "4a3b63da9819f815dd382fea5687fcba24fbd033"},
		{"leave.lua", plainScripts.leave, "d3ce2ed1edc7d4cbdbfdc782b3f86360af237ebb"},
		{"expire.lua", plainScripts.expire, "824453628393a0908c44912e65f1ce324a6c1ed0"},
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
