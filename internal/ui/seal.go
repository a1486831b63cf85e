package ui

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"strings"
	"time"

	"github.com/lockapi/lockapi/internal/auth"
)

// A sealed session is the cookie's value on a server with keys:
//
//	base64url(payload) "." base64url(HMAC-SHA256(mac key, "lockapi-ui-session\n" payload))
//
// payload: the session id (16 bytes), the expiry (8 bytes, Unix seconds,
// big-endian), the key's fingerprint (auth.Key.Fingerprint, 16 bytes) and
// the principal. The mac and fingerprint keys are derived from the
// release-URL secrets (auth.ReleaseSigner.Derive): the first seals, every
// one opens. Nothing in it is the key or an encoding of it.
const (
	sealIDLen  = 16
	sealFixed  = sealIDLen + 8 + auth.FingerprintLen
	sealDomain = "lockapi-ui-session\n"
)

// Purposes of the keys derived from the server's secrets.
const (
	purposeMAC         = "ui-session-mac"
	purposeFingerprint = "ui-session-key-fingerprint"
	purposeCSRF        = "ui-csrf"
)

func sealMAC(key, payload []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(sealDomain))
	m.Write(payload)
	return m.Sum(nil)
}

// seal returns the cookie value of session id of key until exp.
func (h *Handler) seal(id []byte, exp time.Time, key *auth.Key) string {
	payload := make([]byte, 0, sealFixed+len(key.Principal))
	payload = append(payload, id...)
	payload = binary.BigEndian.AppendUint64(payload, uint64(exp.Unix()))
	payload = append(payload, key.Fingerprint(h.secrets.Derive(purposeFingerprint)[0])...)
	payload = append(payload, key.Principal...)
	mac := sealMAC(h.secrets.Derive(purposeMAC)[0], payload)
	return base64.RawURLEncoding.EncodeToString(payload) + "." + base64.RawURLEncoding.EncodeToString(mac)
}

// unseal returns the session value seals, if one of the server's secrets
// sealed it, it has not expired at now, and its key is in force: still
// configured (the keys in force now, which a reload changes) for the same
// principal, and unexpired.
func (h *Handler) unseal(value string, now time.Time) (session, bool) {
	p64, m64, ok := strings.Cut(value, ".")
	payload, err1 := base64.RawURLEncoding.DecodeString(p64)
	mac, err2 := base64.RawURLEncoding.DecodeString(m64)
	if !ok || err1 != nil || err2 != nil || len(payload) <= sealFixed {
		return session{}, false
	}
	macKeys, fpKeys := h.secrets.Derive(purposeMAC), h.secrets.Derive(purposeFingerprint)
	for i := range macKeys {
		if !hmac.Equal(mac, sealMAC(macKeys[i], payload)) {
			continue
		}
		exp := time.Unix(int64(binary.BigEndian.Uint64(payload[sealIDLen:])), 0)
		if !now.Before(exp) {
			return session{}, false
		}
		key, err := h.keys.ByFingerprint(fpKeys[i], payload[sealIDLen+8:sealFixed], now)
		if err != nil || key.Principal != string(payload[sealFixed:]) {
			return session{}, false
		}
		id := base64.RawURLEncoding.EncodeToString(payload[:sealIDLen])
		return session{id: id, key: key, expires: exp, csrfKey: h.csrfKey()}, true
	}
	return session{}, false
}

// csrfKey keys the sessions' CSRF tokens.
func (h *Handler) csrfKey() []byte {
	return h.secrets.Derive(purposeCSRF)[0]
}
