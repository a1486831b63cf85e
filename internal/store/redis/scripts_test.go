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
		{"acquire.lua", acquireScript, "b606f584d14a8365c343cbefd11806b00ed3ce9b"},
		{"renew.lua", renewScript, "c768c9fdd041e3e66e485c4a64f180ba3f9ba10e"},
		{"release.lua", releaseScript, "43bf2b995a1246854bbd88e2905ce084b3e0f90b"},
		{"force_release.lua", forceReleaseScript, "a6ed16ced2a5d2ec7ea73c545f49ae8a2a7d402b"},
		{"inspect.lua", inspectScript, "7d6b791240fc17f8182e451b4d346b1d8d308e87"},
		{"abandon.lua", abandonScript, "9eb5a26e62efd1f67e322f6b39bf09102db5c861"},
		{"leave.lua", leaveScript, "30c65593be6bc86586212e83f3d93b7ced087e86"},
		{"expire.lua", expireScript, "4ddc601bfd4a1ea753d5519b0be639f83eed1d09"},
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
