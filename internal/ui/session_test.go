package ui

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/lockapi/lockapi/internal/auth"
	"github.com/lockapi/lockapi/internal/store/memory"
)

// signedIn reports whether the cookie is a session: a page of the
// dashboard answers, rather than sending to sign in.
func signedIn(t *testing.T, h http.Handler, cookie string) bool {
	t.Helper()
	w := serve(h, "GET", "/ui/", cookie, nil)
	switch {
	case w.Code == http.StatusOK:
		return true
	case w.Code == http.StatusSeeOther && strings.HasPrefix(w.Header().Get("Location"), "/ui/signin"):
		return false
	}
	t.Fatalf("GET /ui/: %d %v", w.Code, w.Header())
	return false
}

// The cookie holds neither the key nor any encoding of it, nor the hash
// the key line configures.
func TestSession_cookie_holds_no_key(t *testing.T) {
	d := newDash(t, memory.New())
	for _, key := range []string{d.admin, d.reader, d.teamA} {
		cookie, _ := d.signIn(t, key)
		sum := sha256.Sum256([]byte(key))
		secret := strings.TrimPrefix(key, "lka_")
		raw, _ := base64.RawURLEncoding.DecodeString(secret)
		var decoded []byte
		for part := range strings.SplitSeq(cookie, ".") {
			b, err := base64.RawURLEncoding.DecodeString(part)
			if err != nil {
				t.Fatalf("cookie part %q is not base64url", part)
			}
			decoded = append(decoded, b...)
		}
		for what, enc := range map[string]string{
			"the key":                key,
			"the key's secret":       secret,
			"base64url of the key":   base64.RawURLEncoding.EncodeToString([]byte(key)),
			"base64 of the key":      base64.StdEncoding.EncodeToString([]byte(key)),
			"hex of the key":         hex.EncodeToString([]byte(key)),
			"the key's SHA-256":      hex.EncodeToString(sum[:]),
			"base64url of its hash":  base64.RawURLEncoding.EncodeToString(sum[:]),
			"the key's random bytes": base64.RawURLEncoding.EncodeToString(raw),
		} {
			if strings.Contains(cookie, enc) || strings.Contains(cookie, enc[:16]) {
				t.Errorf("the cookie holds %s: %s", what, cookie)
			}
		}
		for what, b := range map[string][]byte{"key": []byte(key), "hash": sum[:], "random bytes": raw} {
			if strings.Contains(string(decoded), string(b[:12])) {
				t.Errorf("the cookie's decoded bytes hold the %s", what)
			}
		}
		if !signedIn(t, d.h, cookie) {
			t.Fatal("the session does not work")
		}
	}
}

// A session ends when it expires.
func TestSession_expiry_ends_it(t *testing.T) {
	d := newDash(t, memory.New())
	k, err := d.keys.Authenticate(d.admin, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	id := []byte("0123456789abcdef")
	if !signedIn(t, d.h, d.h.seal(id, time.Now().Add(time.Minute), k)) {
		t.Fatal("a live session does not work")
	}
	if signedIn(t, d.h, d.h.seal(id, time.Now().Add(-time.Second), k)) {
		t.Error("an expired session works")
	}
	// The TTL from sign-in: a session of the default TTL has ended after it.
	cookie, _ := d.signIn(t, d.admin)
	if _, ok := d.h.unseal(cookie, time.Now().Add(DefaultSessionTTL-time.Minute)); !ok {
		t.Error("the session ended before its TTL")
	}
	if _, ok := d.h.unseal(cookie, time.Now().Add(DefaultSessionTTL+time.Second)); ok {
		t.Error("the session outlives its TTL")
	}
}

// A key that leaves the configuration ends its sessions at once, and the
// others' go on; a key that comes back (the same line) works again.
func TestSession_revoked_key_ends_it(t *testing.T) {
	d := newDash(t, memory.New())
	admin, _ := d.signIn(t, d.admin)
	reader, _ := d.signIn(t, d.reader)
	without, err := auth.ParseKeys(d.lines[1] + "\n" + d.lines[2])
	if err != nil {
		t.Fatal(err)
	}
	d.keys.Replace(without)
	if signedIn(t, d.h, admin) {
		t.Error("a session of a removed key works")
	}
	if !signedIn(t, d.h, reader) {
		t.Error("a session of a key still configured ended")
	}
	if w := serve(d.h, "POST", "/ui/signin", "", url.Values{"key": {d.admin}}); w.Code != http.StatusUnauthorized {
		t.Errorf("sign in with a removed key: %d", w.Code)
	}
	// The same key's line with fewer scopes: the session has the new ones.
	narrowed, err := auth.ParseKeys(strings.Replace(d.lines[0], "scopes=admin", "scopes=locks:read", 1) + "\n" + d.lines[1])
	if err != nil {
		t.Fatal(err)
	}
	d.keys.Replace(narrowed)
	if !signedIn(t, d.h, admin) {
		t.Fatal("the session of a key configured again does not work")
	}
	if body := serve(d.h, "GET", "/ui/", admin, nil).Body.String(); !strings.Contains(body, `<span class="scopes">locks:read</span>`) {
		t.Errorf("the session does not have the key's new scopes:\n%s", body)
	}
}

// Signing out ends the session for every copy of its cookie; the key's
// other sessions go on.
func TestSession_sign_out_ends_it(t *testing.T) {
	d := newDash(t, memory.New())
	cookie, csrf := d.signIn(t, d.admin)
	other, _ := d.signIn(t, d.admin)
	w := serve(d.h, "POST", "/ui/signout", cookie, url.Values{"csrf": {csrf}})
	if w.Code != http.StatusSeeOther || w.Header().Get("Location") != "/ui/signin" {
		t.Fatalf("sign out: %d %v", w.Code, w.Header())
	}
	if signedIn(t, d.h, cookie) {
		t.Error("a copy of a signed-out session's cookie works")
	}
	if !signedIn(t, d.h, other) {
		t.Error("signing out ended the key's other session")
	}
}

// A cookie changed in any way, or sealed with another secret, is refused;
// one sealed with a secret the server still verifies with is not.
func TestSession_tampered_cookie_is_refused(t *testing.T) {
	d := newDash(t, memory.New())
	cookie, _ := d.signIn(t, d.reader)
	p64, m64, _ := strings.Cut(cookie, ".")
	payload, _ := base64.RawURLEncoding.DecodeString(p64)
	reseal := func(p []byte) string { return base64.RawURLEncoding.EncodeToString(p) + "." + m64 }
	principal := append(append([]byte{}, payload[:sealFixed]...), "ops"...)
	later := append([]byte{}, payload...)
	later[sealIDLen] ^= 0x01 // the expiry, years on
	flipped := []byte(m64)
	flipped[3] ^= 0x01
	for what, c := range map[string]string{
		"another principal": reseal(principal),
		"a later expiry":    reseal(later),
		"a changed MAC":     p64 + "." + string(flipped),
		"no MAC":            p64,
		"a cut MAC":         p64 + "." + m64[:10],
		"the id alone":      strings.Repeat("A", sessionIDLen),
		"garbage":           "!!.!!",
	} {
		if signedIn(t, d.h, c) {
			t.Errorf("a cookie with %s works", what)
		}
	}

	// Sealed by another server's secret.
	other := New(Config{Store: d.store, Keys: d.keys, API: http.NotFoundHandler(), Force: d.h.force})
	k, _ := d.keys.Authenticate(d.reader, time.Now())
	if signedIn(t, d.h, other.seal(make([]byte, sealIDLen), time.Now().Add(time.Hour), k)) {
		t.Error("a session sealed with another secret works")
	}
}

// Sessions follow the secrets' rotation as release URLs do: sealed with a
// secret that still verifies, a session works; once it no longer does, not.
func TestSession_secret_rotation(t *testing.T) {
	d := newDash(t, memory.New())
	old, fresh := []byte("the-old-secret-0123456789"), []byte("a-fresh-secret-0123456789")
	signer, err := auth.NewReleaseSigner(old)
	if err != nil {
		t.Fatal(err)
	}
	h := New(Config{Store: d.store, Keys: d.keys, API: http.NotFoundHandler(), Force: d.h.force, Secrets: signer})
	d.h = h
	cookie, _ := d.signIn(t, d.admin)
	if err := signer.SetSecrets(fresh, old); err != nil {
		t.Fatal(err)
	}
	if !signedIn(t, h, cookie) {
		t.Error("a session sealed with a secret that still verifies ended")
	}
	if err := signer.SetSecrets(fresh); err != nil {
		t.Fatal(err)
	}
	if signedIn(t, h, cookie) {
		t.Error("a session sealed with a retired secret works")
	}
}
