package webhook_test

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockapi/lockapi/client"
	"github.com/lockapi/lockapi/internal/webhook"
)

// The Standard Webhooks test vector, as its reference libraries test it:
// interoperability, not just our signer agreeing with our verifier.
const (
	specSecret    = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	specID        = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	specTimestamp = 1614265330
	specBody      = `{"test": 2432232314}`
	specSignature = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
)

func TestSign_spec_vector(t *testing.T) {
	got := webhook.Sign([]string{specSecret}, specID, time.Unix(specTimestamp, 0), []byte(specBody))
	if got != specSignature {
		t.Fatalf("Sign = %q, want the spec's %q", got, specSignature)
	}
	h := http.Header{}
	h.Set("webhook-id", specID)
	h.Set("webhook-timestamp", strconv.Itoa(specTimestamp))
	h.Set("webhook-signature", "v1,bm9wZQ== "+specSignature) // another signature first
	v := client.WebhookVerifier{Secrets: []string{specSecret}, Now: func() time.Time { return time.Unix(specTimestamp+10, 0) }}
	if _, err := v.Verify(h, []byte(specBody)); err != nil {
		t.Fatalf("Verify of the spec vector: %v", err)
	}
}

func signed(t *testing.T, secrets []string, id string, at time.Time, body string) http.Header {
	t.Helper()
	h := http.Header{}
	webhook.SignHeaders(h, secrets, id, at, []byte(body))
	return h
}

func TestVerify(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { return now }
	oldSecret, newSecret := webhook.NewSecret(), webhook.NewSecret()
	body := `{"id":"1-0","type":"released"}`

	t.Run("OK", func(t *testing.T) {
		h := signed(t, []string{newSecret}, "1-0", now, body)
		if _, err := (client.WebhookVerifier{Secrets: []string{newSecret}, Now: clock}).Verify(h, []byte(body)); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("Rotation", func(t *testing.T) {
		// A subscription with two secrets signs with both: a receiver
		// that knows either verifies.
		h := signed(t, []string{oldSecret, newSecret}, "1-0", now, body)
		if n := len(strings.Fields(h.Get("webhook-signature"))); n != 2 {
			t.Fatalf("signature header %q: want 2 signatures", h.Get("webhook-signature"))
		}
		for _, s := range []string{oldSecret, newSecret} {
			if _, err := (client.WebhookVerifier{Secrets: []string{s}, Now: clock}).Verify(h, []byte(body)); err != nil {
				t.Fatalf("verify with one of two secrets: %v", err)
			}
		}
	})
	t.Run("ErrSignature", func(t *testing.T) {
		h := signed(t, []string{newSecret}, "1-0", now, body)
		v := client.WebhookVerifier{Secrets: []string{newSecret}, Now: clock}
		cases := map[string]func() (http.Header, string){
			"tampered body": func() (http.Header, string) { return h, strings.Replace(body, "released", "granted", 1) },
			"other id":      func() (http.Header, string) { h2 := h.Clone(); h2.Set("webhook-id", "2-0"); return h2, body },
			"other secret":  func() (http.Header, string) { return signed(t, []string{oldSecret}, "1-0", now, body), body },
			"other version": func() (http.Header, string) {
				h2 := h.Clone()
				h2.Set("webhook-signature", "v1a,"+h.Get("webhook-signature")[3:])
				return h2, body
			},
			"shifted stamp": func() (http.Header, string) {
				h2 := h.Clone()
				h2.Set("webhook-timestamp", strconv.FormatInt(now.Unix()+1, 10))
				return h2, body
			},
		}
		for name, c := range cases {
			hh, b := c()
			if _, err := v.Verify(hh, []byte(b)); !errors.Is(err, client.ErrWebhookSignature) {
				t.Errorf("%s: %v, want ErrSignature", name, err)
			}
		}
	})
	t.Run("ErrTimestamp", func(t *testing.T) {
		v := client.WebhookVerifier{Secrets: []string{newSecret}, Now: clock}
		for _, at := range []time.Time{now.Add(-client.DefaultWebhookTolerance - time.Second), now.Add(client.DefaultWebhookTolerance + time.Second)} {
			h := signed(t, []string{newSecret}, "1-0", at, body)
			if _, err := v.Verify(h, []byte(body)); !errors.Is(err, client.ErrWebhookTimestamp) {
				t.Errorf("timestamp %v off: %v, want ErrTimestamp", at.Sub(now), err)
			}
		}
		h := signed(t, []string{newSecret}, "1-0", now, body)
		h.Set("webhook-timestamp", "soon")
		if _, err := v.Verify(h, []byte(body)); !errors.Is(err, client.ErrWebhookTimestamp) {
			t.Errorf("malformed timestamp: %v", err)
		}
	})
	t.Run("ErrMissingHeaders", func(t *testing.T) {
		for _, name := range []string{"webhook-id", "webhook-timestamp", "webhook-signature"} {
			h := signed(t, []string{newSecret}, "1-0", now, body)
			h.Del(name)
			if _, err := (client.WebhookVerifier{Secrets: []string{newSecret}, Now: clock}).Verify(h, []byte(body)); !errors.Is(err, client.ErrWebhookHeaders) {
				t.Errorf("without %s: %v", name, err)
			}
		}
	})
}

func TestNewSecret(t *testing.T) {
	s := webhook.NewSecret()
	key, err := webhook.SecretKey(s)
	if err != nil || len(key) != 32 || !strings.HasPrefix(s, "whsec_") {
		t.Fatalf("NewSecret = %q: key %d bytes, %v", s, len(key), err)
	}
	if webhook.NewSecret() == s {
		t.Fatal("two secrets are the same")
	}
	for _, bad := range []string{"", "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_%%%", "whsec_c2hvcnQ="} {
		if _, err := webhook.SecretKey(bad); err == nil {
			t.Errorf("SecretKey(%q): no error", bad)
		}
	}
}
