package redis

import (
	"context"
	"strings"
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
		{"acquire.lua", acquireScript, "a3b6ab2b5422c7795982535ad784c93c8d1ca550"},
		{"renew.lua", renewScript, "816a978f7dfc2f12e74a3003d7752bb998abe156"},
		{"release.lua", releaseScript, "fcbb655bcd5e9147d16fc2c6630d159ce6c827a3"},
		{"force_release.lua", forceReleaseScript, "e3e4e9b76d9ce6dd8f358ae20dda43d2d79d9d3d"},
		{"inspect.lua", inspectScript, "4454a53c199bf0d645a471162a6a56261703152e"},
		{"abandon.lua", abandonScript, "61c7e7302cc388c32503fc2490a14f54a696258c"},
		{"leave.lua", leaveScript, "756513d3d687ece68f3d735b817da5fca5912733"},
		{"expire.lua", expireScript, "6118d79eff729170a78c5254c0fc0f234c261720"},
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

// clusterSlot is Redis Cluster's key slot: CRC16 (XMODEM) of the hash tag, or
// of the whole key without one, modulo 16384.
func clusterSlot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for b := 0; b < 8; b++ {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % 16384
}
