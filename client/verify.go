package client

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// EventPing is the type of a test delivery (PingWebhook): webhooks only,
// never in Events. Its Event has only ID, Type and Time.
const EventPing EventType = "ping"

// Errors of VerifyWebhook; test for them with errors.Is. A receiver answers
// any of them with 401 and drops the delivery.
var (
	// ErrWebhookHeaders: the webhook-id, webhook-timestamp or
	// webhook-signature header is missing.
	ErrWebhookHeaders = errors.New("lockapi: webhook: missing webhook-id, webhook-timestamp or webhook-signature")
	// ErrWebhookTimestamp: the timestamp is malformed, or further from now
	// than the tolerance (too old: perhaps a replay; or from the future).
	ErrWebhookTimestamp = errors.New("lockapi: webhook: the timestamp is malformed or too far from now")
	// ErrWebhookSignature: no signature matches the secret, or the secret
	// is not a whsec_ one.
	ErrWebhookSignature = errors.New("lockapi: webhook: no signature matches")
)

// DefaultWebhookTolerance is how far from the receiver's clock a delivery's
// timestamp may be, as the Standard Webhooks reference libraries have it.
const DefaultWebhookTolerance = 5 * time.Minute

// VerifyWebhook checks a webhook delivery (docs/WEBHOOKS.md) as the Standard
// Webhooks specification tells receivers to, and returns its event: header
// and body as received (the raw body, before any JSON decoding), secret as
// CreateWebhook gave it. The timestamp must be within
// DefaultWebhookTolerance of now, then any v1 signature must match.
//
// A captured delivery can be replayed within the tolerance: a receiver that
// must not act twice keeps the ids it has handled (header webhook-id, the
// event's ID, the same on every retry of one event) and ignores repeats.
func VerifyWebhook(secret string, header http.Header, body []byte) (Event, error) {
	return WebhookVerifier{Secrets: []string{secret}}.Verify(header, body)
}

// WebhookVerifier is VerifyWebhook with more than one secret (during a
// rotation, a delivery signed with either verifies), another tolerance, or
// another clock.
type WebhookVerifier struct {
	Secrets []string
	// Tolerance is DefaultWebhookTolerance when 0.
	Tolerance time.Duration
	// Now is time.Now when nil.
	Now func() time.Time
}

// Verify checks a delivery and returns its event; see VerifyWebhook.
func (v WebhookVerifier) Verify(header http.Header, body []byte) (Event, error) {
	id, tsText, sigs := header.Get("webhook-id"), header.Get("webhook-timestamp"), header.Get("webhook-signature")
	if id == "" || tsText == "" || sigs == "" {
		return Event{}, ErrWebhookHeaders
	}
	ts, err := strconv.ParseInt(tsText, 10, 64)
	if err != nil {
		return Event{}, ErrWebhookTimestamp
	}
	now, tol := time.Now(), v.Tolerance
	if v.Now != nil {
		now = v.Now()
	}
	if tol <= 0 {
		tol = DefaultWebhookTolerance
	}
	if at := time.Unix(ts, 0); at.Before(now.Add(-tol)) || at.After(now.Add(tol)) {
		return Event{}, ErrWebhookTimestamp
	}
	if !v.signed(id, ts, body, strings.Fields(sigs)) {
		return Event{}, ErrWebhookSignature
	}
	var e Event
	if err := json.Unmarshal(body, &e); err != nil {
		return Event{}, fmt.Errorf("lockapi: webhook: a signed body that is no event: %w", err)
	}
	return e, nil
}

// signed reports whether any v1 signature of sigs is that of a secret of
// v, compared in constant time.
func (v WebhookVerifier) signed(id string, ts int64, body []byte, sigs []string) bool {
	for _, secret := range v.Secrets {
		key, ok := webhookKey(secret)
		if !ok {
			continue
		}
		mac := hmac.New(sha256.New, key)
		fmt.Fprintf(mac, "%s.%d.", id, ts)
		mac.Write(body)
		want := "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
		for _, got := range sigs {
			// Other versions (v1a, asymmetric) are not lockapi's.
			if strings.HasPrefix(got, "v1,") && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1 {
				return true
			}
		}
	}
	return false
}

// webhookKey decodes a "whsec_" secret into its HMAC key.
func webhookKey(secret string) ([]byte, bool) {
	b64, ok := strings.CutPrefix(secret, "whsec_")
	if !ok {
		return nil, false
	}
	key, err := base64.StdEncoding.DecodeString(b64)
	return key, err == nil && len(key) > 0
}
