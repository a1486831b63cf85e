package auth_test

import (
	"bytes"
	"context"
	"sync"
	"testing"

	"github.com/lockapi/lockapi/internal/auth"
	redisstore "github.com/lockapi/lockapi/internal/store/redis"
	"github.com/lockapi/lockapi/internal/testkit/redistest"
)

// Instances that start together on one Redis agree on one release secret,
// kept under their key prefix; later instances read it back.
var ctx = context.Background()

func TestSharedReleaseSecret(t *testing.T) {
	srv := redistest.Start(t)
	const prefix = "secrettest:"
	const n = 8
	secrets := make([][]byte, n)
	var wg sync.WaitGroup
	for i := range n {
		rdb := srv.Client(t) // a client per instance
		wg.Go(func() {
			s, err := auth.SharedReleaseSecret(ctx, rdb, redisstore.ReleaseSecretKey(prefix))
			if err != nil {
				t.Error(err)
			}
			secrets[i] = s
		})
	}
	wg.Wait()
	for i, s := range secrets {
		if len(s) < 32 || !bytes.Equal(s, secrets[0]) {
			t.Fatalf("instance %d got secret %q, instance 0 %q", i, s, secrets[0])
		}
	}

	rdb := srv.Client(t)
	if stored, err := rdb.Get(ctx, redisstore.ReleaseSecretKey(prefix)).Bytes(); err != nil || !bytes.Equal(stored, secrets[0]) {
		t.Fatalf("%s holds %q, %v; want the secret", redisstore.ReleaseSecretKey(prefix), stored, err)
	}
	if again, err := auth.SharedReleaseSecret(ctx, rdb, redisstore.ReleaseSecretKey(prefix)); err != nil || !bytes.Equal(again, secrets[0]) {
		t.Fatalf("a later instance got %q, %v", again, err)
	}
	if other, err := auth.SharedReleaseSecret(ctx, rdb, redisstore.ReleaseSecretKey("othertest:")); err != nil || bytes.Equal(other, secrets[0]) {
		t.Fatalf("another prefix got %q, %v; want a secret of its own", other, err)
	}

	// A secret lost with Redis's data is made anew.
	if err := rdb.Del(ctx, redisstore.ReleaseSecretKey(prefix)).Err(); err != nil {
		t.Fatal(err)
	}
	if fresh, err := auth.SharedReleaseSecret(ctx, rdb, redisstore.ReleaseSecretKey(prefix)); err != nil || len(fresh) < 32 || bytes.Equal(fresh, secrets[0]) {
		t.Fatalf("after the key was lost: %q, %v; want a new secret", fresh, err)
	}
}
