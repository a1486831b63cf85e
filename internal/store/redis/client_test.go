package redis_test

import (
	"strings"
	"testing"

	redisstore "github.com/lockapi/lockapi/internal/store/redis"
)

// Target names where each mode connects, for the startup log, and never a
// credential from the URL.
func TestClient_Target(t *testing.T) {
	for _, tc := range []struct {
		mode, url, want string
	}{
		{redisstore.ModeSingle, "redis://app:s3cret-pass@10.0.0.7:6380/2", "redis://10.0.0.7:6380/2"},
		{"", "rediss://:s3cret-pass@redis.internal:6379", "rediss://redis.internal:6379/0"},
		{redisstore.ModeSentinel, "redis://:s3cret-pass@s1:26379/1?master_name=mymaster&password=data-s3cret-pass&addr=s2:26379&addr=s3:26379",
			`redis://s1:26379,s2:26379,s3:26379 (sentinels), master "mymaster", db 1`},
		{redisstore.ModeCluster, "rediss://app:s3cret-pass@n1:7000?addr=n2:7000&addr=n3:7000", "rediss://n1:7000,n2:7000,n3:7000 (cluster seeds)"},
	} {
		c, err := redisstore.NewClient(redisstore.ClientConfig{URL: tc.url, Mode: tc.mode})
		if err != nil {
			t.Fatalf("%s %s: %v", tc.mode, tc.url, err)
		}
		got := c.Target()
		_ = c.Close()
		if got != tc.want {
			t.Errorf("%s %s: target %q, want %q", tc.mode, tc.url, got, tc.want)
		}
		if strings.Contains(got, "s3cret") || strings.Contains(got, "app") {
			t.Errorf("%s: target %q shows a credential", tc.mode, got)
		}
	}
}
