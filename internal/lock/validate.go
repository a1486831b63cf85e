package lock

import (
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Limits that keep names, owners and metadata small enough for one Redis hash
// and one log line.
const (
	MaxNameLen       = 200
	MaxOwnerLen      = 128
	MaxMetadataKeys  = 16
	MaxMetadataBytes = 4096
	MinTTL           = 10 * time.Millisecond
	// MaxIdempotencyKeyLen bounds an Idempotency-Key; a UUID or ULID fits
	// many times over.
	MaxIdempotencyKeyLen = 255
)

// nameChars marks the bytes allowed in a lock name. None of them is special
// in a Redis hash tag ({}) or a SCAN pattern (*?[]\), so names go into keys
// and patterns unescaped.
var nameChars = func() (t [256]bool) {
	for c := 'a'; c <= 'z'; c++ {
		t[c] = true
	}
	for c := 'A'; c <= 'Z'; c++ {
		t[c] = true
	}
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for _, c := range ".:_@~-" {
		t[c] = true
	}
	return t
}()

// ValidName reports whether name is 1–200 characters from A-Z a-z 0-9 . _ : @ ~ -,
// not all of them dots: ".", ".." and "..." are path segments that clients
// normalise away, so no URL would reach such a lock.
func ValidName(name string) bool {
	return len(name) >= 1 && len(name) <= MaxNameLen && validNameChars(name) && strings.Trim(name, ".") != ""
}

func validNameChars(s string) bool {
	for i := 0; i < len(s); i++ {
		if !nameChars[s[i]] {
			return false
		}
	}
	return true
}

// CheckName returns a field error for an invalid lock name.
func CheckName(field, name string) *FieldError {
	if ValidName(name) {
		return nil
	}
	return &FieldError{Field: field, Detail: fmt.Sprintf("a lock name is 1-%d characters from A-Z a-z 0-9 . _ : @ ~ -, not only dots", MaxNameLen)}
}

// ReservedPrefix begins the names that lockapi uses for itself, such as a
// webhook worker's lease (lockapi.webhook.<id>). The API refuses them to
// every caller (docs/SECURITY.md): a client holding one could stop what
// lockapi does with it.
const ReservedPrefix = "lockapi."

// Reserved reports whether name is one that lockapi keeps for itself.
func Reserved(name string) bool { return strings.HasPrefix(name, ReservedPrefix) }

// CheckPrefix returns a field error for an invalid name prefix ("" is valid).
func CheckPrefix(field, prefix string) *FieldError {
	if len(prefix) <= MaxNameLen && validNameChars(prefix) {
		return nil
	}
	return &FieldError{Field: field, Detail: fmt.Sprintf("a name prefix is 0-%d characters from A-Z a-z 0-9 . _ : @ ~ -", MaxNameLen)}
}

// CheckOwner returns a field error for an owner that is not 1–128 printable
// characters.
func CheckOwner(field, owner string) *FieldError {
	bad := &FieldError{Field: field, Detail: fmt.Sprintf("an owner is 1-%d printable characters", MaxOwnerLen)}
	if owner == "" || !utf8.ValidString(owner) || utf8.RuneCountInString(owner) > MaxOwnerLen {
		return bad
	}
	for _, r := range owner {
		// U+FFFD is what a JSON decoder makes of invalid text (a lone
		// surrogate, say): two different owners would become one.
		if !unicode.IsPrint(r) || r == utf8.RuneError {
			return bad
		}
	}
	return nil
}

// CheckMetadata returns a field error for metadata over the size limits or
// with keys or values that are not valid UTF-8.
func CheckMetadata(field string, md map[string]string) *FieldError {
	if len(md) > MaxMetadataKeys {
		return &FieldError{Field: field, Detail: fmt.Sprintf("at most %d metadata keys", MaxMetadataKeys)}
	}
	size := 0
	for k, v := range md {
		if k == "" || !utf8.ValidString(k) || !utf8.ValidString(v) || strings.ContainsRune(k+v, utf8.RuneError) {
			return &FieldError{Field: field, Detail: "metadata keys must be non-empty and keys and values valid UTF-8"}
		}
		size += len(k) + len(v)
	}
	if size > MaxMetadataBytes {
		return &FieldError{Field: field, Detail: fmt.Sprintf("metadata keys and values add up to at most %d bytes", MaxMetadataBytes)}
	}
	return nil
}

// CheckIdempotencyKey returns a field error for a key that is not 0–255
// printable ASCII characters ("" means no key).
func CheckIdempotencyKey(field, key string) *FieldError {
	ok := len(key) <= MaxIdempotencyKeyLen
	for i := 0; ok && i < len(key); i++ {
		ok = key[i] >= 0x21 && key[i] <= 0x7e
	}
	if ok {
		return nil
	}
	return &FieldError{Field: field, Detail: fmt.Sprintf("an idempotency key is 1-%d printable ASCII characters", MaxIdempotencyKeyLen)}
}

// CheckTTL returns a field error for a TTL shorter than MinTTL. The longest
// TTL is the server's to set.
func CheckTTL(field string, ttl time.Duration) *FieldError {
	if ttl >= MinTTL {
		return nil
	}
	return &FieldError{Field: field, Detail: fmt.Sprintf("must be at least %d", MinTTL.Milliseconds())}
}

// Validate checks an acquire request against the domain's rules, all of
// them, once: whoever takes a request from outside calls it (the HTTP API),
// and a Store takes the request as valid and checks none of it again.
// Limits that are configuration, such as the longest TTL, are the caller's.
func (r AcquireRequest) Validate() error {
	return invalidIf(
		CheckName("name", r.Lock),
		CheckOwner("owner", r.Owner),
		CheckMetadata("metadata", r.Metadata),
		CheckIdempotencyKey("Idempotency-Key", r.IdempotencyKey),
		CheckMode("mode", r.Mode),
		CheckLimit("limit", r.Limit, r.Mode),
		r.checkTTL(),
		r.checkSession(),
	)
}

// checkTTL checks the TTL of an unbound lease; a bound one has none.
func (r AcquireRequest) checkTTL() *FieldError {
	if r.Session != "" {
		if r.TTL != 0 {
			return &FieldError{Field: "ttl_ms", Detail: "a lease bound to a session has no TTL of its own: give session or ttl_ms, not both"}
		}
		return nil
	}
	return CheckTTL("ttl_ms", r.TTL)
}

func (r AcquireRequest) checkSession() *FieldError {
	if r.Session == "" {
		return nil
	}
	return CheckSessionID("session", r.Session)
}

// invalidIf returns an invalid error of the field errors that are not nil,
// or nil when all are.
func invalidIf(checks ...*FieldError) error {
	var fields []FieldError
	for _, fe := range checks {
		if fe != nil {
			fields = append(fields, *fe)
		}
	}
	if len(fields) > 0 {
		return Invalid(fields...)
	}
	return nil
}

// MaxLimit bounds a semaphore's permits.
const MaxLimit = 10000

// CheckMode returns a field error for a mode that is not "", "exclusive" or
// "shared".
func CheckMode(field string, m Mode) *FieldError {
	switch m {
	case "", Exclusive, Shared:
		return nil
	}
	return &FieldError{Field: field, Detail: `must be "exclusive" or "shared"`}
}

// CheckLimit returns a field error for a semaphore limit out of range, or
// one given with shared mode (a permit is not shared).
func CheckLimit(field string, limit int, m Mode) *FieldError {
	if limit < 0 || limit > MaxLimit {
		return &FieldError{Field: field, Detail: fmt.Sprintf("a semaphore has 1-%d permits", MaxLimit)}
	}
	if limit > 0 && m == Shared {
		return &FieldError{Field: field, Detail: `a semaphore's permits are not shared: "limit" goes with mode "exclusive" only`}
	}
	return nil
}
