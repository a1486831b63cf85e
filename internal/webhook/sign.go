package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
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
//
// Receivers verify with the SDKs (client.VerifyWebhook in Go) or with the
// spec's reference libraries; the tests hold this signer to both.

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
