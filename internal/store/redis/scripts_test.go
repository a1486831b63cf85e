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
		{"acquire.lua", acquireScript, "aa7bd19751f872528dc3ce522c632a1a108a2bd4"},
		{"renew.lua", renewScript, "e0f4a5dc5a12f5882039fbe210600d415e3c5414"},
		{"release.lua", releaseScript, "70fc5aee3a7184ea65b40d7cda5c4f8268fbdc59"},
		{"force_release.lua", forceReleaseScript, "450b13652c1368a89faa79b8b7848712d9f765b2"},
		{"inspect.lua", inspectScript, "4f8085857da8144d8979a3a95df9d7c3b80df7c8"},
		{"abandon.lua", abandonScript, "94402ba7a6dc030440f38fc2b6071b707a89c8f4"},
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
			lockSlot, fenceSlot := clusterSlot(s.lockKey(name)), clusterSlot(s.fenceKey(name))
			if lockSlot != fenceSlot || lockSlot != clusterSlot("{"+name+"}") {
				t.Errorf("prefix %q name %q: lock key slot %d, fence key slot %d", prefix, name, lockSlot, fenceSlot)
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
