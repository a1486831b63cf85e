package auth

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"

	goredis "github.com/redis/go-redis/v9"
)

// SharedReleaseSecret returns the secret that signs release URLs for every
// lockapi instance on this Redis, kept under key (the store names it:
// redisstore.ReleaseSecretKey), so that a URL issued by one instance works
// on the others and after restarts. The first instance to
// ask creates it: 32 random bytes, base64-encoded, set only if the key is
// absent (SET NX), so instances starting together agree on one. The
// secret is the key's value as it is, which an operator can copy into
// LOCKAPI_RELEASE_SECRETS to rotate away from it. The key never expires;
// if Redis loses it, the next instance to start creates a new one.
func SharedReleaseSecret(ctx context.Context, rdb goredis.StringCmdable, key string) ([]byte, error) {
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
