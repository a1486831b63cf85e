package auth

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"hash"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// ReleaseSigner signs and verifies release URLs: a URL that releases one
// lease with no Authorization header, for CI systems and webhooks that can
// only call a URL. The signature is an HMAC-SHA256 over the lock name, the
// lease id and the expiry. Several secrets verify, so secrets can be rotated:
// the first signs.
type ReleaseSigner struct {
	keys atomic.Pointer[releaseKeys]
}

// releaseKeys is one set of secrets of a ReleaseSigner.
type releaseKeys struct {
	secrets [][]byte
	// signers pools HMACs keyed with secrets[0]: every Lease response is
	// signed, and a fresh HMAC costs two SHA-256 states.
	signers sync.Pool
}

// MinSecretLen is the shortest release secret accepted.
const MinSecretLen = 16

// RandomSecret returns a new random release secret, for a process that has
// none configured or shared: what it signs verifies in this process only.
func RandomSecret() []byte { return []byte(rand.Text()) }

// NewReleaseSigner returns a signer; secrets[0] signs, all verify.
func NewReleaseSigner(secrets ...[]byte) (*ReleaseSigner, error) {
	s := &ReleaseSigner{}
	if err := s.SetSecrets(secrets...); err != nil {
		return nil, err
	}
	return s, nil
}

// SetSecrets replaces the signer's secrets while it is in use: from now on
// secrets[0] signs and all of them verify. To keep the URLs signed so far
// working, list the secret that signed them too.
func (s *ReleaseSigner) SetSecrets(secrets ...[]byte) error {
	if len(secrets) == 0 {
		return errors.New("auth: no release secret")
	}
	for _, secret := range secrets {
		if len(secret) < MinSecretLen {
			return errors.New("auth: a release secret must be at least 16 bytes")
		}
	}
	k := &releaseKeys{secrets: secrets}
	k.signers.New = func() any { return hmac.New(sha256.New, secrets[0]) }
	s.keys.Store(k)
	return nil
}

func mac(secret []byte, name, leaseID string, exp int64) []byte {
	return macWith(hmac.New(sha256.New, secret), name, leaseID, exp)
}

func macWith(h hash.Hash, name, leaseID string, exp int64) []byte {
	var sum [sha256.Size]byte
	return append([]byte(nil), sumWith(h, &sum, name, leaseID, exp)...)
}

// sumWith writes the MAC of a release into sum, and returns it: the
// signing on every acquire's path allocates nothing for it.
func sumWith(h hash.Hash, sum *[sha256.Size]byte, name, leaseID string, exp int64) []byte {
	h.Reset()
	// Newlines cannot occur in names, lease ids or numbers, so the message
	// is unambiguous.
	var buf [256]byte
	msg := append(buf[:0], "lockapi-release\n"...)
	msg = append(msg, name...)
	msg = append(msg, '\n')
	msg = append(msg, leaseID...)
	msg = append(msg, '\n')
	msg = strconv.AppendInt(msg, exp, 10)
	h.Write(msg)
	return h.Sum(sum[:0])
}

// ReleasePath returns the signed release path of a lease, valid until exp:
// /v1/locks/{name}/leases/{lease_id}/release?exp=…&sig=…, the query's
// values needing no escape (digits, and base64url).
func (s *ReleaseSigner) ReleasePath(name, leaseID string, exp time.Time) string {
	e := exp.Unix()
	k := s.keys.Load()
	h := k.signers.Get().(hash.Hash)
	var sum [sha256.Size]byte
	sig := sumWith(h, &sum, name, leaseID, e)
	k.signers.Put(h)
	var b strings.Builder
	const sigLen = (sha256.Size*8 + 5) / 6 // base64url, unpadded
	b.Grow(len("/v1/locks//leases//release?exp=&sig=") + len(name) + len(leaseID) + 20 + sigLen)
	b.WriteString("/v1/locks/")
	b.WriteString(name)
	b.WriteString("/leases/")
	b.WriteString(leaseID)
	b.WriteString("/release?exp=")
	var num [20]byte
	b.Write(strconv.AppendInt(num[:0], e, 10))
	b.WriteString("&sig=")
	var enc [sigLen]byte
	base64.RawURLEncoding.Encode(enc[:], sig)
	b.Write(enc[:])
	return b.String()
}

// Errors of Verify.
var (
	ErrBadSignature = errors.New("the release URL's signature is not valid")
	ErrExpired      = errors.New("the release URL has expired")
)

// Verify checks a release URL's exp and sig for name and leaseID at now. The
// signature is compared in constant time against every secret.
func (s *ReleaseSigner) Verify(name, leaseID, exp, sig string, now time.Time) error {
	e, err := strconv.ParseInt(exp, 10, 64)
	if err != nil {
		return ErrBadSignature
	}
	got, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil || len(got) != sha256.Size {
		return ErrBadSignature
	}
	ok := false
	for _, secret := range s.keys.Load().secrets {
		if hmac.Equal(got, mac(secret, name, leaseID, e)) {
			ok = true
		}
	}
	if !ok {
		return ErrBadSignature
	}
	if now.Unix() > e {
		return ErrExpired
	}
	return nil
}
