package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Signing follows the Standard Webhooks specification
// (https://github.com/standard-webhooks/standard-webhooks/blob/main/spec/standard-webhooks.md):
//
//   - webhook-id is the message id, the same on every retry: lockapi sends
//     the event id, the receiver's idempotency key;
//   - webhook-timestamp is the attempt's time in unix seconds;
//   - webhook-signature is "v1," + base64(HMAC-SHA256(key, id.timestamp.body))
//     for each secret, separated by spaces, where a secret is "whsec_" +
//     base64(key).

// Header names of a signed delivery.
const (
	HeaderID        = "webhook-id"
	HeaderTimestamp = "webhook-timestamp"
	HeaderSignature = "webhook-signature"
)

// SecretPrefix starts every secret.
const SecretPrefix = "whsec_"

// secretBytes is the size of generated keys: the spec asks for 24 to 64.
const secretBytes = 32

// DefaultTolerance is how far from the receiver's clock a timestamp may be
// before Verify refuses it, as the spec's reference libraries have it: a
// captured delivery cannot be replayed later than that.
const DefaultTolerance = 5 * time.Minute

// NewSecret returns a fresh random secret.
func NewSecret() string {
	return SecretPrefix + base64.StdEncoding.EncodeToString(randomBytes(secretBytes))
}

// SecretKey decodes a secret into its HMAC key.
func SecretKey(secret string) ([]byte, error) {
	b64, ok := strings.CutPrefix(secret, SecretPrefix)
	if !ok {
		return nil, fmt.Errorf("a webhook secret starts with %q", SecretPrefix)
	}
	key, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return nil, fmt.Errorf("a webhook secret is %q followed by standard base64: %v", SecretPrefix, err)
	}
	if len(key) < 24 || len(key) > 64 {
		return nil, fmt.Errorf("a webhook secret's key is 24 to 64 bytes, not %d", len(key))
	}
	return key, nil
}

// signature returns one "v1,<base64>" signature.
func signature(key []byte, id string, ts int64, body []byte) string {
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id))
	mac.Write([]byte{'.'})
	mac.Write([]byte(strconv.FormatInt(ts, 10)))
	mac.Write([]byte{'.'})
	mac.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

// Sign returns the webhook-signature header value for a message: one
// signature per secret, separated by spaces. Secrets that do not decode
// are skipped (they were checked when configured).
func Sign(secrets []string, id string, ts time.Time, body []byte) string {
	sigs := make([]string, 0, len(secrets))
	for _, s := range secrets {
		key, err := SecretKey(s)
		if err != nil {
			continue
		}
		sigs = append(sigs, signature(key, id, ts.Unix(), body))
	}
	return strings.Join(sigs, " ")
}

// SignHeaders sets the three headers of a signed message on h.
func SignHeaders(h http.Header, secrets []string, id string, ts time.Time, body []byte) {
	h.Set(HeaderID, id)
	h.Set(HeaderTimestamp, strconv.FormatInt(ts.Unix(), 10))
	h.Set(HeaderSignature, Sign(secrets, id, ts, body))
}

// Errors of Verify.
var (
	ErrMissingHeaders = errors.New("webhook: missing webhook-id, webhook-timestamp or webhook-signature")
	ErrTimestamp      = errors.New("webhook: the timestamp is malformed or too far from now")
	ErrSignature      = errors.New("webhook: no signature matches")
)

// Verifier checks signed messages the way the spec tells receivers to: the
// timestamp within Tolerance of Now, then any v1 signature in the header
// matching, compared in constant time. Receivers written in Go may use it
// as it is.
type Verifier struct {
	// Secrets are the receiver's secrets: a message signed with any of
	// them verifies (during a rotation the receiver knows both).
	Secrets []string
	// Tolerance is DefaultTolerance when 0.
	Tolerance time.Duration
	// Now is time.Now when nil.
	Now func() time.Time
}

// Verify checks a message: its headers and its raw body, exactly as
// received.
func (v Verifier) Verify(h http.Header, body []byte) error {
	id, tsText, sigs := h.Get(HeaderID), h.Get(HeaderTimestamp), h.Get(HeaderSignature)
	if id == "" || tsText == "" || sigs == "" {
		return ErrMissingHeaders
	}
	ts, err := strconv.ParseInt(tsText, 10, 64)
	if err != nil {
		return ErrTimestamp
	}
	now, tol := time.Now(), v.Tolerance
	if v.Now != nil {
		now = v.Now()
	}
	if tol <= 0 {
		tol = DefaultTolerance
	}
	if at := time.Unix(ts, 0); at.Before(now.Add(-tol)) || at.After(now.Add(tol)) {
		return ErrTimestamp
	}
	for _, secret := range v.Secrets {
		key, err := SecretKey(secret)
		if err != nil {
			continue
		}
		want := signature(key, id, ts, body)
		for _, got := range strings.Fields(sigs) {
			// Signatures of other versions (v1a for asymmetric keys) are
			// not ours to check.
			if strings.HasPrefix(got, "v1,") && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1 {
				return nil
			}
		}
	}
	return ErrSignature
}
