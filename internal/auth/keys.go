// Package auth decides who a request comes from and what it may do: API keys
// with scopes and lock-name patterns, and signed release URLs for callers
// that can only call a URL (CI systems, webhooks).
//
// Keys are configured only as SHA-256 hashes, one per line:
//
//	principal=ci scopes=locks:read,locks:write patterns=ci:*,deploy:* sha256=<64 hex digits>
//
// An optional expires=<RFC 3339 UTC time> field ends the key's life at that
// instant; a line without it never expires.
//
// `lockapi keys new` prints a fresh key and its line.
package auth

import (
	"bufio"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockapi/lockapi/internal/lock"
)

// Scope is one permission of a key.
type Scope string

const (
	ScopeRead  Scope = "locks:read"  // inspect locks
	ScopeWrite Scope = "locks:write" // acquire, renew and release own leases
	ScopeAdmin Scope = "admin"       // list, force release, act on anyone's lease; implies the others
)

var knownScopes = []Scope{ScopeRead, ScopeWrite, ScopeAdmin}

// Key is one configured API key.
type Key struct {
	Principal string
	Scopes    []Scope
	// Patterns are the lock names the key may use: '*' matches any run of
	// characters, everything else matches itself.
	Patterns []string
	// Expires is when the key stops authenticating; zero: never.
	Expires time.Time
	hash    [sha256.Size]byte
}

// ExpiredAt reports whether the key has expired at now: from its Expires
// instant on, it authenticates nobody.
func (k *Key) ExpiredAt(now time.Time) bool {
	return !k.Expires.IsZero() && !now.Before(k.Expires)
}

// Has reports whether the key carries scope; admin carries every scope.
func (k *Key) Has(scope Scope) bool {
	return slices.Contains(k.Scopes, scope) || slices.Contains(k.Scopes, ScopeAdmin)
}

// MayUse reports whether name matches one of the key's patterns.
func (k *Key) MayUse(name string) bool {
	for _, p := range k.Patterns {
		if Match(p, name) {
			return true
		}
	}
	return false
}

// Allow is the authorization rule of every front door, the API and the
// dashboard alike: it reports whether the key may use scope on lock name
// ("": on no lock in particular), with the answer both give when it may
// not. A nil key is the caller of a server without keys, which runs open:
// everything is allowed.
func (k *Key) Allow(scope Scope, name string) error {
	if k == nil {
		return nil
	}
	if !k.Has(scope) {
		return &lock.Error{Code: lock.CodeForbidden, Detail: fmt.Sprintf("this API key lacks the %s scope", scope)}
	}
	if name != "" && !k.MayUse(name) {
		return &lock.Error{Code: lock.CodeForbidden, Detail: fmt.Sprintf("this API key may not use lock %q", name)}
	}
	return nil
}

// AllowPrefix is Allow for every lock whose name starts with prefix, which
// a webhook subscription needs: it delivers the events of every lock it
// selects to whoever runs the receiver. The key's patterns must cover the
// whole range: one of them is a literal followed by one '*', the literal a
// prefix of prefix.
func (k *Key) AllowPrefix(scope Scope, prefix string) error {
	if err := k.Allow(scope, ""); err != nil || k == nil {
		return err
	}
	for _, p := range k.Patterns {
		lit, ok := strings.CutSuffix(p, "*")
		if ok && !strings.Contains(lit, "*") && strings.HasPrefix(prefix, lit) {
			return nil
		}
	}
	return &lock.Error{Code: lock.CodeForbidden, Detail: "this API key's lock-name patterns do not cover every lock under prefix \"" + prefix + "\", whose events the webhook would deliver"}
}

// Keyring is the set of configured keys. A nil or empty Keyring means the
// server runs open. Its keys can be replaced while it is in use (Replace):
// every request reads the set in force then.
type Keyring struct {
	set atomic.Pointer[[]Key]

	mu      sync.Mutex
	changed chan struct{} // closed by Replace; nil until Changed asks
}

// current returns the keys in force; they never change once in force.
func (r *Keyring) current() []Key {
	if r == nil {
		return nil
	}
	if p := r.set.Load(); p != nil {
		return *p
	}
	return nil
}

// Len returns the number of keys.
func (r *Keyring) Len() int {
	return len(r.current())
}

// Replace puts next's keys in force in r, at once for every request that
// starts from now, and wakes whoever waits on Changed. It returns how many
// keys next adds and how many of r's it drops (a key whose line changed
// counts as both).
func (r *Keyring) Replace(next *Keyring) (added, removed int) {
	old, keys := r.current(), next.current()
	added, removed = diffKeys(keys, old), diffKeys(old, keys)
	r.set.Store(&keys)
	r.mu.Lock()
	if r.changed != nil {
		close(r.changed)
		r.changed = nil
	}
	r.mu.Unlock()
	return added, removed
}

// diffKeys counts the keys of a that b has not, line for line.
func diffKeys(a, b []Key) int {
	n := 0
	for i := range a {
		if !slices.ContainsFunc(b, func(k Key) bool { return sameKey(&a[i], &k) }) {
			n++
		}
	}
	return n
}

// sameKey reports whether a and b are the same key, configured alike.
func sameKey(a, b *Key) bool {
	return a.hash == b.hash && a.Principal == b.Principal && a.Expires.Equal(b.Expires) &&
		slices.Equal(a.Scopes, b.Scopes) && slices.Equal(a.Patterns, b.Patterns)
}

// Changed returns a channel that is closed when the keys are next replaced.
func (r *Keyring) Changed() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.changed == nil {
		r.changed = make(chan struct{})
	}
	return r.changed
}

// Valid reports whether k, which authenticated a caller earlier, is still
// in force at now: configured alike in the keys in force, and not expired.
// Whatever holds on to a key (an event stream, a dashboard session) asks
// again when the keys change.
func (r *Keyring) Valid(k *Key, now time.Time) bool {
	if k == nil || k.ExpiredAt(now) {
		return false
	}
	keys := r.current()
	return slices.ContainsFunc(keys, func(c Key) bool { return sameKey(&c, k) })
}

// ErrUnknownKey is Authenticate's answer to a token that is no configured
// key.
var ErrUnknownKey = errors.New("the API key is not valid")

// ExpiredKeyError is Authenticate's answer to a configured key whose
// expires= time has passed. Its message names the time, never the key or
// its principal: the caller holding the key learns when it ended, nothing
// more.
type ExpiredKeyError struct {
	Principal string
	At        time.Time
}

func (e *ExpiredKeyError) Error() string {
	return "the API key expired at " + e.At.UTC().Format(time.RFC3339)
}

// Authenticate is the authentication rule of every front door, the API and
// the dashboard alike: it returns the key whose hash matches token, unless
// that key has expired at now (*ExpiredKeyError) or none matches
// (ErrUnknownKey). It hashes token and compares the hash with every
// configured hash in constant time, without stopping at a match, so timing
// tells nothing about which key, if any, matched.
func (r *Keyring) Authenticate(token string, now time.Time) (*Key, error) {
	if r == nil || token == "" {
		return nil, ErrUnknownKey
	}
	sum := sha256.Sum256([]byte(token))
	keys := r.current()
	found := -1
	for i := range keys {
		if subtle.ConstantTimeCompare(sum[:], keys[i].hash[:]) == 1 {
			found = i
		}
	}
	if found < 0 {
		return nil, ErrUnknownKey
	}
	k := &keys[found]
	if k.ExpiredAt(now) {
		return nil, &ExpiredKeyError{Principal: k.Principal, At: k.Expires}
	}
	return k, nil
}

// Expired returns the principals of the keys that have expired at now, in
// configuration order, for a server to warn about at startup.
func (r *Keyring) Expired(now time.Time) []string {
	var principals []string
	keys := r.current()
	for i := range keys {
		if keys[i].ExpiredAt(now) {
			principals = append(principals, keys[i].Principal)
		}
	}
	return principals
}

// ParseKeys reads key lines; blank lines and lines starting with # are
// skipped. Lines may also be separated by ';' so that a list fits in one
// environment variable.
func ParseKeys(text string) (*Keyring, error) {
	var keys []Key
	sc := bufio.NewScanner(strings.NewReader(strings.ReplaceAll(text, ";", "\n")))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, err := parseKeyLine(line)
		if err != nil {
			return nil, &LineError{Line: n, Err: err}
		}
		for _, other := range keys {
			if other.hash == k.hash {
				return nil, &LineError{Line: n, Err: errors.New("the same key is configured twice")}
			}
		}
		keys = append(keys, k)
	}
	r := &Keyring{}
	r.set.Store(&keys)
	return r, sc.Err()
}

// LineError is ParseKeys's error: which key line is bad (counting every
// line, blank and comment lines too), and why, never echoing the line.
type LineError struct {
	Line int
	Err  error
}

func (e *LineError) Error() string { return fmt.Sprintf("key line %d: %v", e.Line, e.Err) }
func (e *LineError) Unwrap() error { return e.Err }

func parseKeyLine(line string) (Key, error) {
	var k Key
	seen := map[string]bool{}
	for _, field := range strings.Fields(line) {
		name, value, ok := strings.Cut(field, "=")
		// The field is not echoed: it may be a key pasted in place of its
		// line, and the error is logged.
		switch {
		case !ok:
			return k, errors.New("a field without =: want principal=… scopes=… patterns=… sha256=… [expires=…]")
		case seen[name]:
			return k, fmt.Errorf("%s= given twice", name)
		}
		seen[name] = true
		switch name {
		case "principal":
			if fe := lock.CheckOwner("principal", value); fe != nil || strings.ContainsAny(value, " \t") {
				return k, fmt.Errorf("principal %q: 1-128 printable characters without spaces", value)
			}
			k.Principal = value
		case "scopes":
			for _, s := range strings.Split(value, ",") {
				if !slices.Contains(knownScopes, Scope(s)) {
					return k, fmt.Errorf("unknown scope %q (want locks:read, locks:write, admin)", s)
				}
				k.Scopes = append(k.Scopes, Scope(s))
			}
		case "patterns":
			for _, p := range strings.Split(value, ",") {
				if err := CheckPattern(p); err != nil {
					return k, err
				}
				k.Patterns = append(k.Patterns, p)
			}
		case "sha256":
			b, err := hex.DecodeString(value)
			if err != nil || len(b) != sha256.Size {
				return k, fmt.Errorf("sha256 must be 64 hex digits")
			}
			copy(k.hash[:], b)
		case "expires":
			t, err := ParseExpires(value)
			if err != nil {
				return k, err
			}
			k.Expires = t
		default:
			return k, fmt.Errorf("unknown field %q", name)
		}
	}
	for _, f := range []string{"principal", "scopes", "patterns", "sha256"} {
		if !seen[f] {
			return k, fmt.Errorf("missing %s=", f)
		}
	}
	return k, nil
}

// ParseExpires reads an expires= value: an RFC 3339 time in UTC (a "Z"
// suffix), so that a line reads the same wherever it is read.
func ParseExpires(value string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339, value)
	if err != nil || !strings.HasSuffix(value, "Z") {
		return time.Time{}, fmt.Errorf("expires %q: %w", value, ErrBadExpires)
	}
	return t, nil
}

// ErrBadExpires is the error of an expires= value that does not read, for
// callers that report a key line's problem without echoing the line.
var ErrBadExpires = errors.New("want an RFC 3339 UTC time such as 2027-01-31T00:00:00Z")

// FormatExpires writes t as an expires= value: RFC 3339 in UTC, to the
// second.
func FormatExpires(t time.Time) string {
	return t.UTC().Truncate(time.Second).Format(time.RFC3339)
}

// CheckPattern reports whether p is a valid lock-name pattern: lock-name
// characters and '*'.
func CheckPattern(p string) error {
	if p == "" || len(p) > lock.MaxNameLen || !lock.ValidName(strings.ReplaceAll(p, "*", "a")) {
		return fmt.Errorf("pattern %q: lock-name characters and * only", p)
	}
	return nil
}

// Match reports whether name matches pattern, where '*' matches any run of
// characters (including none) and every other byte matches itself. It runs
// in O(len(pattern)*len(name)) at worst, with no recursion.
func Match(pattern, name string) bool {
	p, n := 0, 0
	star, mark := -1, 0
	for n < len(name) {
		switch {
		case p < len(pattern) && pattern[p] == '*':
			star, mark = p, n
			p++
		case p < len(pattern) && pattern[p] == name[n]:
			p++
			n++
		case star >= 0:
			// Let the last star swallow one more byte and retry.
			mark++
			p, n = star+1, mark
		default:
			return false
		}
	}
	for p < len(pattern) && pattern[p] == '*' {
		p++
	}
	return p == len(pattern)
}

// NewKey returns a fresh random API key that never expires and its
// configuration line.
func NewKey(principal string, scopes []Scope, patterns []string) (key, line string, err error) {
	return NewExpiringKey(principal, scopes, patterns, time.Time{})
}

// NewExpiringKey is NewKey for a key that expires at expires (to the
// second; zero: never).
func NewExpiringKey(principal string, scopes []Scope, patterns []string, expires time.Time) (key, line string, err error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", "", err
	}
	key = "lka_" + base64.RawURLEncoding.EncodeToString(b)
	sum := sha256.Sum256([]byte(key))
	ss := make([]string, len(scopes))
	for i, s := range scopes {
		ss[i] = string(s)
	}
	line = fmt.Sprintf("principal=%s scopes=%s patterns=%s sha256=%s",
		principal, strings.Join(ss, ","), strings.Join(patterns, ","), hex.EncodeToString(sum[:]))
	if !expires.IsZero() {
		line += " expires=" + FormatExpires(expires)
	}
	if _, err := parseKeyLine(line); err != nil {
		return "", "", err
	}
	return key, line, nil
}
