package redis

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"

	goredis "github.com/redis/go-redis/v9"
)

// releaseSecretKey names the key, under the store's prefix, that holds the
// secret signing release URLs when none is configured. It has no hash tag:
// one key per Redis, and on Cluster any slot will do.
const releaseSecretKey = "release-secret"

// ReleaseSecretKey returns the key of the shared release-URL secret under
// prefix ("" is DefaultPrefix).
func ReleaseSecretKey(prefix string) string {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	return prefix + releaseSecretKey
}

// ReleaseSecret returns the secret that signs release URLs for every lockapi
// instance on this Redis with this key prefix, so that a URL issued by one
// instance works on the others and after restarts. The first instance to
// ask creates it: 32 random bytes, base64-encoded, set only if the key is
// absent (SET NX), so instances starting together agree on one. The
// secret is the key's value as it is, which an operator can copy into
// LOCKAPI_RELEASE_SECRETS to rotate away from it. The key never expires;
// if Redis loses it, the next instance to start creates a new one.
func ReleaseSecret(ctx context.Context, rdb goredis.StringCmdable, prefix string) ([]byte, error) {
	key := ReleaseSecretKey(prefix)
	random := make([]byte, 32)
	_, _ = rand.Read(random) // never fails (crypto/rand)
	fresh := base64.RawStdEncoding.EncodeToString(random)
	for range 3 {
		created, err := rdb.SetNX(ctx, key, fresh, 0).Result()
		if err != nil {
			return nil, err
		}
		if created {
			return []byte(fresh), nil
		}
		secret, err := rdb.Get(ctx, key).Bytes()
		if errors.Is(err, goredis.Nil) {
			continue // deleted between the two calls: try to create it again
		}
		return secret, err
	}
	return nil, errors.New("the release secret key keeps disappearing: " + key)
}
