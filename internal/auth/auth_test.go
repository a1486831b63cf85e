package auth

import (
	"encoding/base64"
	"errors"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/lockapi/lockapi/internal/lock"
)

func TestMatch(t *testing.T) {
	for _, c := range []struct {
		pattern, name string
		want          bool
	}{
		{"ci:*", "ci:build", true},
		{"ci:*", "ci:", true},
		{"ci:*", "cd:build", false},
		{"ci:*", "xci:build", false},
		{"payments:orders:*", "payments:orders:42", true},
		{"payments:orders:*", "payments:refunds:42", false},
		{"*", "anything", true},
		{"deploy:prod", "deploy:prod", true},
		{"deploy:prod", "deploy:prod2", false},
		{"*:prod", "deploy:prod", true},
		{"a*b*c", "a-x-b-y-c", true},
		{"a*b*c", "a-x-c-y-b", false},
		{"a**", "a", true},
	} {
		if got := Match(c.pattern, c.name); got != c.want {
			t.Errorf("Match(%q, %q) = %v, want %v", c.pattern, c.name, got, c.want)
		}
	}
}

// matchRef is the obvious, slower definition Match must agree with.
func matchRef(pattern, name string) bool {
	parts := strings.Split(pattern, "*")
	for i, p := range parts {
		parts[i] = regexp.QuoteMeta(p)
	}
	return regexp.MustCompile("(?s)^" + strings.Join(parts, ".*") + "$").MatchString(name)
}

func FuzzMatch(f *testing.F) {
	for _, s := range [][2]string{{"ci:*", "ci:build"}, {"a*b*c", "abc"}, {"*", ""}, {"x*y", "xyxy"}, {"**a", "ba"}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, pattern, name string) {
		// Patterns are checked when keys are loaded; names by the API.
		if CheckPattern(pattern) != nil || !lock.ValidName(name) {
			return
		}
		if got, want := Match(pattern, name), matchRef(pattern, name); got != want {
			t.Fatalf("Match(%q, %q) = %v, reference says %v", pattern, name, got, want)
		}
	})
}

// TestKey_Allow is the one authorization rule of the API and the
// dashboard: the answers both give.
func TestKey_Allow(t *testing.T) {
	writer := &Key{Principal: "ci", Scopes: []Scope{ScopeWrite}, Patterns: []string{"ci:*"}}
	admin := &Key{Principal: "ops", Scopes: []Scope{ScopeAdmin}, Patterns: []string{"team-a:*", "x*y"}}
	var open *Key // the caller of a server without keys
	for _, tc := range []struct {
		name  string
		key   *Key
		scope Scope
		lock  string
		want  string // "" when allowed, else the Detail
	}{
		{"OK_open", open, ScopeAdmin, "anything", ""},
		{"OK_scope_and_name", writer, ScopeWrite, "ci:1", ""},
		{"OK_no_name", writer, ScopeWrite, "", ""},
		{"OK_admin_implies_read", admin, ScopeRead, "team-a:1", ""},
		{"ErrScope", writer, ScopeAdmin, "ci:1", "this API key lacks the admin scope"},
		{"ErrScope_before_name", writer, ScopeAdmin, "other", "this API key lacks the admin scope"},
		{"ErrName", writer, ScopeWrite, "other", `this API key may not use lock "other"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.key.Allow(tc.scope, tc.lock)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("err = %v, want nil", err)
				}
				return
			}
			if e := lock.AsError(err); e.Code != lock.CodeForbidden || e.Detail != tc.want {
				t.Fatalf("err = %v, want forbidden %q", err, tc.want)
			}
		})
	}
	t.Run("AllowPrefix", func(t *testing.T) {
		if err := open.AllowPrefix(ScopeAdmin, ""); err != nil {
			t.Fatalf("open: %v", err)
		}
		if err := admin.AllowPrefix(ScopeAdmin, "team-a:web:"); err != nil {
			t.Fatalf("covered prefix: %v", err)
		}
		for _, prefix := range []string{"", "team-b:", "x"} {
			if err := admin.AllowPrefix(ScopeAdmin, prefix); lock.ErrorCode(err) != lock.CodeForbidden || !strings.Contains(err.Error(), "do not cover") {
				t.Fatalf("prefix %q: %v, want forbidden", prefix, err)
			}
		}
		if err := writer.AllowPrefix(ScopeAdmin, "ci:"); lock.ErrorCode(err) != lock.CodeForbidden || !strings.Contains(err.Error(), "lacks the admin scope") {
			t.Fatalf("no admin scope: %v", err)
		}
	})
}

func TestParseKeys(t *testing.T) {
	key, line, err := NewKey("ci", []Scope{ScopeRead, ScopeWrite}, []string{"ci:*", "deploy:*"})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(line, key) {
		t.Fatal("the configuration line contains the key itself")
	}
	ring, err := ParseKeys("# comment\n\n" + line + "\n")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	k, err := ring.Authenticate(key, now)
	if err != nil || k.Principal != "ci" || !k.Has(ScopeWrite) || k.Has(ScopeAdmin) || !k.MayUse("deploy:prod") || k.MayUse("payments:1") || !k.Expires.IsZero() {
		t.Fatalf("key = %+v, %v", k, err)
	}
	if _, err := ring.Authenticate(key, now.AddDate(100, 0, 0)); err != nil {
		t.Fatalf("a key without expires= expired: %v", err)
	}
	if _, err := ring.Authenticate(key+"x", now); err != ErrUnknownKey {
		t.Fatalf("a wrong key: %v, want ErrUnknownKey", err)
	}
	if _, err := ring.Authenticate("", now); err != ErrUnknownKey {
		t.Fatalf("an empty key: %v, want ErrUnknownKey", err)
	}

	for _, bad := range []string{
		"principal=ci scopes=locks:read patterns=ci:*",                             // no sha256
		"principal=ci scopes=root patterns=ci:* sha256=" + strings.Repeat("a", 64), // unknown scope
		"principal=ci scopes=admin patterns=ci:{x} sha256=" + strings.Repeat("a", 64),
		"principal=ci scopes=admin patterns=ci:* sha256=abc",
		"principal=ci principal=cd scopes=admin patterns=* sha256=" + strings.Repeat("a", 64),
		"garbage",
		line + ";" + line, // the same key twice
		line + " expires=2027-01-31T00:00:00Z expires=2028-01-31T00:00:00Z",
	} {
		if _, err := ParseKeys(bad); err == nil {
			t.Errorf("ParseKeys(%q) accepted it", bad)
		}
	}
}

func TestParseKeys_expires(t *testing.T) {
	key, line, err := NewKey("ci", []Scope{ScopeRead}, []string{"ci:*"})
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2027, 1, 31, 12, 0, 0, 0, time.UTC)

	t.Run("OK", func(t *testing.T) {
		ring, err := ParseKeys(line + " expires=2027-01-31T12:00:00Z")
		if err != nil {
			t.Fatal(err)
		}
		k, err := ring.Authenticate(key, at.Add(-time.Second))
		if err != nil || !k.Expires.Equal(at) {
			t.Fatalf("a second before expiry: %+v, %v", k, err)
		}
		if got := ring.Expired(at.Add(-time.Second)); len(got) != 0 {
			t.Fatalf("Expired before expiry = %v", got)
		}
	})

	t.Run("ErrExpired", func(t *testing.T) {
		ring, err := ParseKeys(line + " expires=2027-01-31T12:00:00Z")
		if err != nil {
			t.Fatal(err)
		}
		for _, now := range []time.Time{at, at.Add(time.Hour)} {
			k, err := ring.Authenticate(key, now)
			var expired *ExpiredKeyError
			if k != nil || !errors.As(err, &expired) || expired.Principal != "ci" || !expired.At.Equal(at) {
				t.Fatalf("at %v: %+v, %v; want an ExpiredKeyError", now, k, err)
			}
			if msg := err.Error(); msg != "the API key expired at 2027-01-31T12:00:00Z" || strings.Contains(msg, key) {
				t.Fatalf("message %q", msg)
			}
		}
		if got := ring.Expired(at); len(got) != 1 || got[0] != "ci" {
			t.Fatalf("Expired = %v, want [ci]", got)
		}
		// A wrong token says nothing about the expired key.
		if _, err := ring.Authenticate(key+"x", at); err != ErrUnknownKey {
			t.Fatalf("a wrong key: %v, want ErrUnknownKey", err)
		}
	})

	t.Run("ErrBadTime", func(t *testing.T) {
		for _, v := range []string{
			"", "tomorrow", "2027-01-31", "2027-01-31T12:00:00", "2027-01-31T12:00:00+02:00",
			"2027-13-01T00:00:00Z", "1738324800",
		} {
			_, err := ParseKeys("# c\n" + line + " expires=" + v)
			if err == nil {
				t.Errorf("expires=%q accepted", v)
				continue
			}
			if msg := err.Error(); !strings.HasPrefix(msg, "key line 2: expires ") || !strings.Contains(msg, "RFC 3339 UTC") || strings.Contains(msg, "\n") {
				t.Errorf("expires=%q: message %q", v, msg)
			}
		}
	})

	t.Run("NewExpiringKey", func(t *testing.T) {
		key, line, err := NewExpiringKey("ci", []Scope{ScopeRead}, []string{"*"}, at.Add(500*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasSuffix(line, " expires=2027-01-31T12:00:00Z") {
			t.Fatalf("line %q", line)
		}
		ring, err := ParseKeys(line)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ring.Authenticate(key, at); err == nil {
			t.Fatal("the key authenticated at its expiry")
		}
	})
}

func FuzzParseKeys(f *testing.F) {
	f.Add("principal=ci scopes=locks:read,admin patterns=ci:*,x sha256=" + strings.Repeat("0", 64))
	f.Add("# c\n;principal=a scopes=admin patterns=* sha256=" + strings.Repeat("f", 64))
	f.Fuzz(func(t *testing.T, text string) {
		ring, err := ParseKeys(text)
		if err != nil {
			return
		}
		for _, k := range ring.current() {
			if k.Principal == "" || len(k.Scopes) == 0 || len(k.Patterns) == 0 {
				t.Fatalf("accepted an incomplete key: %+v", k)
			}
		}
	})
}

func TestReleaseSigner(t *testing.T) {
	old := []byte("old-secret-0123456789")
	cur := []byte("current-secret-0123456789")
	s, err := NewReleaseSigner(cur, old)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	exp := now.Add(time.Hour)
	path := s.ReleasePath("deploy:prod", "01JD3Z8Q6W9M4T5R2K7X1B0C8N", exp)
	q := path[strings.Index(path, "?")+1:]
	vals := map[string]string{}
	for _, kv := range strings.Split(q, "&") {
		k, v, _ := strings.Cut(kv, "=")
		vals[k] = v
	}
	if err := s.Verify("deploy:prod", "01JD3Z8Q6W9M4T5R2K7X1B0C8N", vals["exp"], vals["sig"], now); err != nil {
		t.Fatalf("a fresh URL does not verify: %v", err)
	}
	for name, c := range map[string][4]string{
		"other lock":  {"deploy:stage", "01JD3Z8Q6W9M4T5R2K7X1B0C8N", vals["exp"], vals["sig"]},
		"other lease": {"deploy:prod", "01JD3Z8Q6W9M4T5R2K7X1B0C8M", vals["exp"], vals["sig"]},
		"later exp":   {"deploy:prod", "01JD3Z8Q6W9M4T5R2K7X1B0C8N", vals["exp"] + "0", vals["sig"]},
		"bad sig":     {"deploy:prod", "01JD3Z8Q6W9M4T5R2K7X1B0C8N", vals["exp"], "AAAA" + vals["sig"][4:]},
		"no sig":      {"deploy:prod", "01JD3Z8Q6W9M4T5R2K7X1B0C8N", vals["exp"], ""},
	} {
		if err := s.Verify(c[0], c[1], c[2], c[3], now); err != ErrBadSignature {
			t.Errorf("%s: %v, want ErrBadSignature", name, err)
		}
	}
	if err := s.Verify("deploy:prod", "01JD3Z8Q6W9M4T5R2K7X1B0C8N", vals["exp"], vals["sig"], exp.Add(time.Second)); err != ErrExpired {
		t.Errorf("after exp: %v, want ErrExpired", err)
	}

	// Rotation: a URL signed with the old secret still verifies while the
	// old secret is listed, and stops when it is dropped.
	oldSigner, _ := NewReleaseSigner(old)
	oldPath := oldSigner.ReleasePath("a", "01JD3Z8Q6W9M4T5R2K7X1B0C8N", exp)
	sig := oldPath[strings.Index(oldPath, "sig=")+4:]
	e := vals["exp"]
	if err := s.Verify("a", "01JD3Z8Q6W9M4T5R2K7X1B0C8N", e, sig, now); err != nil {
		t.Errorf("old-secret URL during rotation: %v", err)
	}
	onlyNew, _ := NewReleaseSigner(cur)
	if err := onlyNew.Verify("a", "01JD3Z8Q6W9M4T5R2K7X1B0C8N", e, sig, now); err != ErrBadSignature {
		t.Errorf("old-secret URL after rotation: %v", err)
	}
	if _, err := NewReleaseSigner([]byte("short")); err == nil {
		t.Error("a short secret was accepted")
	}

	// SetSecrets on a signer in use: the new first secret signs, and a URL
	// signed before still verifies while its secret is listed.
	if err := oldSigner.SetSecrets(cur, old); err != nil {
		t.Fatal(err)
	}
	if err := oldSigner.Verify("a", "01JD3Z8Q6W9M4T5R2K7X1B0C8N", e, sig, now); err != nil {
		t.Errorf("a URL signed before SetSecrets: %v", err)
	}
	newPath := oldSigner.ReleasePath("a", "01JD3Z8Q6W9M4T5R2K7X1B0C8N", exp)
	if err := onlyNew.Verify("a", "01JD3Z8Q6W9M4T5R2K7X1B0C8N", e, newPath[strings.Index(newPath, "sig=")+4:], now); err != nil {
		t.Errorf("a URL signed after SetSecrets does not verify with the new secret: %v", err)
	}
	if err := oldSigner.SetSecrets([]byte("short")); err == nil {
		t.Error("SetSecrets accepted a short secret")
	}
}

// TestReleaseSigner_path_shape pins the path ReleasePath writes by hand to
// the one url.Values wrote before: the query's keys in order, the values
// unescaped, the signature the MAC in base64url.
func TestReleaseSigner_path_shape(t *testing.T) {
	secret := []byte("current-secret-0123456789")
	s, err := NewReleaseSigner(secret)
	if err != nil {
		t.Fatal(err)
	}
	exp := time.Unix(1764201600, 0)
	q := url.Values{}
	q.Set("exp", "1764201600")
	q.Set("sig", base64.RawURLEncoding.EncodeToString(mac(secret, "deploy:prod", "01JD3Z8Q6W9M4T5R2K7X1B0C8N", exp.Unix())))
	want := "/v1/locks/deploy:prod/leases/01JD3Z8Q6W9M4T5R2K7X1B0C8N/release?" + q.Encode()
	if got := s.ReleasePath("deploy:prod", "01JD3Z8Q6W9M4T5R2K7X1B0C8N", exp); got != want {
		t.Errorf("ReleasePath = %s, want %s", got, want)
	}
}

// Replace puts a new set of keys in force for every holder of the
// Keyring, wakes Changed, counts what it added and removed, and Valid
// follows it.
func TestKeyring_Replace(t *testing.T) {
	a, aLine, _ := NewKey("a", []Scope{ScopeRead}, []string{"*"})
	_, bLine, _ := NewKey("b", []Scope{ScopeRead}, []string{"*"})
	c, cLine, _ := NewKey("c", []Scope{ScopeRead}, []string{"*"})
	ring, err := ParseKeys(aLine + "\n" + bLine)
	if err != nil {
		t.Fatal(err)
	}
	ka, err := ring.Authenticate(a, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	changed := ring.Changed()
	next, _ := ParseKeys(bLine + "\n" + cLine)
	if added, removed := ring.Replace(next); added != 1 || removed != 1 {
		t.Errorf("added %d, removed %d; want 1 and 1", added, removed)
	}
	select {
	case <-changed:
	default:
		t.Error("Changed is not closed by Replace")
	}
	if _, err := ring.Authenticate(a, time.Now()); err == nil || ring.Valid(ka, time.Now()) {
		t.Error("a removed key still authenticates")
	}
	if _, err := ring.Authenticate(c, time.Now()); err != nil || ring.Len() != 2 {
		t.Errorf("the new key: %v, %d keys", err, ring.Len())
	}
	// The same key with other scopes is another key to Valid.
	narrowed, _ := ParseKeys(strings.Replace(aLine, "scopes=locks:read", "scopes=admin", 1))
	ring.Replace(narrowed)
	if ring.Valid(ka, time.Now()) {
		t.Error("a key whose line changed is valid as it was")
	}
	if k, err := ring.Authenticate(a, time.Now()); err != nil || !k.Has(ScopeAdmin) {
		t.Errorf("the changed key: %v", err)
	}
}
