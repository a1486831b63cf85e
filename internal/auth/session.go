package auth

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// Derive returns a key for purpose from each of the signer's secrets, in
// their order: the first signs, all verify, as for release URLs. What the
// dashboard seals with its keys works on every instance that shares the
// secrets (kept in Redis, or LOCKAPI_RELEASE_SECRETS), and across restarts.
func (s *ReleaseSigner) Derive(purpose string) [][]byte {
	secrets := s.keys.Load().secrets
	out := make([][]byte, len(secrets))
	for i, secret := range secrets {
		m := hmac.New(sha256.New, secret)
		m.Write([]byte("lockapi-derive\n" + purpose))
		out[i] = m.Sum(nil)
	}
	return out
}

// FingerprintLen is the length of a key's fingerprint.
const FingerprintLen = 16

// Fingerprint returns the key's fingerprint under secret: an HMAC of the
// key's hash, truncated. It names the key without the key: neither the key
// nor its configured hash can be read back from it, nor checked against a
// guess without secret.
func (k *Key) Fingerprint(secret []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("lockapi-key-fingerprint\n"))
	m.Write(k.hash[:])
	return m.Sum(nil)[:FingerprintLen]
}

// ByFingerprint returns the configured key whose fingerprint under secret
// is fp, by Authenticate's rule: ErrUnknownKey when none is (a key removed
// from the configuration), *ExpiredKeyError when it has expired at now.
func (r *Keyring) ByFingerprint(secret, fp []byte, now time.Time) (*Key, error) {
	keys := r.current()
	found := -1
	for i := range keys {
		if subtle.ConstantTimeCompare(fp, keys[i].Fingerprint(secret)) == 1 {
			found = i
		}
	}
	if found < 0 || len(fp) != FingerprintLen {
		return nil, ErrUnknownKey
	}
	k := &keys[found]
	if k.ExpiredAt(now) {
		return nil, &ExpiredKeyError{Principal: k.Principal, At: k.Expires}
	}
	return k, nil
}

// keyContext is the context key of WithKey.
type keyContext struct{}

// WithKey returns ctx with key as the caller a request made in-process (the
// dashboard asking the API) is authenticated as, instead of an
// Authorization header. Only code in this process can set it.
func WithKey(ctx context.Context, key *Key) context.Context {
	return context.WithValue(ctx, keyContext{}, key)
}

// KeyFrom returns the key WithKey put into ctx.
func KeyFrom(ctx context.Context) (*Key, bool) {
	k, ok := ctx.Value(keyContext{}).(*Key)
	return k, ok && k != nil
}

// Revocations records the dashboard sessions that were signed out before
// they expired, until they would have: a sealed session is valid on its
// own, so signing out needs a record that every instance reads.
type Revocations interface {
	// Revoke ends the session id; the record may be dropped after until.
	Revoke(ctx context.Context, id string, until time.Time) error
	// Revoked reports whether id was revoked.
	Revoked(ctx context.Context, id string) (bool, error)
}

// MemoryRevocations are the revocations of one process: on the memory
// store, where there is one instance.
func MemoryRevocations() Revocations { return &memRevocations{ids: map[string]time.Time{}} }

type memRevocations struct {
	mu  sync.Mutex
	ids map[string]time.Time
	// kept is how many records the last sweep kept; sweeps counts the
	// sweeps, for the test of their bound.
	kept, sweeps int
}

// minSweep is the fewest records a sweep waits for.
const minSweep = 64

func (m *memRevocations) Revoke(_ context.Context, id string, until time.Time) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	// Drop the records that ran out, once the records have doubled since
	// the last sweep: a sweep of n records follows n/2 sign-outs at least,
	// so that each costs O(1) amortized, and the records that ran out are
	// never more than the live ones and minSweep.
	if len(m.ids) >= max(2*m.kept, minSweep) {
		now := time.Now()
		for k, u := range m.ids {
			if now.After(u) {
				delete(m.ids, k)
			}
		}
		m.kept = len(m.ids)
		m.sweeps++
	}
	m.ids[id] = until
	return nil
}

func (m *memRevocations) Revoked(_ context.Context, id string) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.ids[id]
	return ok, nil
}

// RedisRevocations keeps revocations in Redis under prefix+id, each with
// the session's remaining lifetime as its TTL, for every instance to read.
func RedisRevocations(rdb goredis.StringCmdable, prefix string) Revocations {
	return redisRevocations{rdb: rdb, prefix: prefix}
}

type redisRevocations struct {
	rdb    goredis.StringCmdable
	prefix string
}

func (r redisRevocations) Revoke(ctx context.Context, id string, until time.Time) error {
	ttl := time.Until(until)
	if ttl <= 0 {
		return nil // expired already
	}
	return r.rdb.Set(ctx, r.prefix+id, "1", ttl).Err()
}

func (r redisRevocations) Revoked(ctx context.Context, id string) (bool, error) {
	err := r.rdb.Get(ctx, r.prefix+id).Err()
	if errors.Is(err, goredis.Nil) {
		return false, nil
	}
	return err == nil, err
}
