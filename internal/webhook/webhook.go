// Package webhook delivers lock events (docs/EVENTS.md) to HTTP receivers
// that subscribed to them: outbound webhooks, signed the Standard Webhooks
// way (https://www.standardwebhooks.com), delivered at least once with the
// event id as the idempotency key.
//
// A Subscription names a URL, a lock-name prefix and event types. It comes
// from the webhooks file (read at start, read-only) or from the admin API,
// which keeps it in a State that every lockapi instance shares. For each
// subscription one worker delivers the subscription's events in log order:
// it reads the store's event log from the subscription's cursor, POSTs each
// matching event and moves the cursor on only once a receiver answered 2xx,
// or once it gave up on the event and kept it as a dead letter.
//
// Which instance delivers is decided by the lock store itself: a worker
// delivers only while it holds a lease on lockapi.webhook.<id>, so that one
// instance delivers a subscription at a time, another takes over within the
// lease's TTL when that instance dies, and a restart resumes from the
// persisted cursor.
package webhook

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/lockapi/lockapi/event"
	"github.com/lockapi/lockapi/internal/lock"
)

// Error codes of this package, beside lock's: the HTTP layer maps them to
// problem types.
const (
	// CodeNotFound: no subscription, or no dead letter, by that id (404).
	CodeNotFound lock.Code = "not-found"
	// CodeExists: a subscription with the same URL, prefix and types
	// exists (409).
	CodeExists lock.Code = "webhook-exists"
	// CodeReadOnly: the subscription comes from the webhooks file, which
	// only an edit of the file changes (409).
	CodeReadOnly lock.Code = "webhook-read-only"
)

// PingType is the type of the event POST /v1/webhooks/{id}/ping delivers.
// It never appears in the event log, so a subscription cannot filter on it.
const PingType = "ping"

// Source says where a subscription comes from.
type Source string

const (
	SourceAPI  Source = "api"  // created over /v1/webhooks, kept in the State
	SourceFile Source = "file" // read from LOCKAPI_WEBHOOKS_FILE
)

// Subscription is one receiver's interest in lock events.
// Its JSON form is how a State keeps it, secrets included.
type Subscription struct {
	ID  string `json:"id"`
	URL string `json:"url"`
	// Prefix selects locks by name ("" for every lock).
	Prefix string `json:"prefix"`
	// Types selects events by type; none selects every type. Sorted and
	// without repeats.
	Types []lock.EventType `json:"types"`
	// Secrets sign each delivery, each with its own signature: more than
	// one while a secret is rotated. Each is "whsec_" + base64.
	Secrets   []string  `json:"secrets"`
	Source    Source    `json:"source"`
	CreatedAt time.Time `json:"created_at"`
	// Principal created it over the API ("" on an open server, and for
	// the file's): its quota counts it (Spec.Quota).
	Principal string `json:"principal,omitempty"`
}

// Filter is the event filter of the subscription.
func (s Subscription) Filter() lock.EventFilter {
	return lock.EventFilter{Prefix: s.Prefix, Types: s.Types}
}

// Match reports whether the subscription delivers e. Events of the leases
// that webhook workers hold themselves (lockapi.webhook.*) are delivered
// only to subscriptions whose prefix names them: otherwise every renewal
// of every worker would reach every catch-all receiver.
func (s Subscription) Match(e lock.Event) bool {
	if strings.HasPrefix(e.Lock, LeasePrefix) && !strings.HasPrefix(s.Prefix, LeasePrefix) {
		return false
	}
	return s.Filter().Match(e)
}

// DedupeKey identifies a subscription by what it delivers where: two
// subscriptions with the same URL, prefix and types would deliver every
// event twice.
func (s Subscription) DedupeKey() string {
	types := make([]string, len(s.Types))
	for i, t := range s.Types {
		types[i] = string(t)
	}
	sum := sha256.Sum256([]byte(s.URL + "\x00" + s.Prefix + "\x00" + strings.Join(types, ",")))
	return hex.EncodeToString(sum[:])
}

// LeasePrefix prefixes the name of the lock whose lease lets a worker
// deliver a subscription: lockapi.webhook.<id>, a reserved name that the
// API refuses to every caller.
const LeasePrefix = lock.ReservedPrefix + "webhook."

// LeasePrincipal is the principal of every worker's lease: a lease of
// LeaseName(id) with another principal is not a worker's.
const LeasePrincipal = leasePrincipal

// LeaseName is the lock a worker holds while it delivers subscription id.
func LeaseName(id string) string { return LeasePrefix + id }

// MaxIDLen bounds a subscription id; ids are also part of lock names and
// Redis keys.
const MaxIDLen = 64

// NewID returns a fresh subscription id: a ULID, in lower case.
func NewID() string { return strings.ToLower(ulid.Make().String()) }

// ValidID reports whether id is 1-64 characters from a-z A-Z 0-9 _ -.
func ValidID(id string) bool {
	if id == "" || len(id) > MaxIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// CheckID returns a field error for an invalid subscription id.
func CheckID(field, id string) *lock.FieldError {
	if ValidID(id) {
		return nil
	}
	return &lock.FieldError{Field: field, Detail: fmt.Sprintf("a webhook id is 1-%d characters from a-z A-Z 0-9 _ -", MaxIDLen)}
}

// Spec is what a new subscription asks for.
type Spec struct {
	URL    string
	Prefix string
	Types  []string
	// Principal asks for it, over the API; Quota, when above 0, is the
	// most subscriptions that principal may have, this one included
	// (LOCKAPI_MAX_WEBHOOKS_PER_PRINCIPAL): the server chooses it.
	Principal string
	Quota     int
}

// MaxURLLen bounds a subscription's URL.
const MaxURLLen = 2048

// Normalize checks spec against the rules that need no network (the URL's
// form and scheme, the prefix, the types) and returns the subscription it
// describes, without id or secrets. Field names in errors are prefixed with
// field, e.g. "webhooks[2]." for the file.
func (p Policy) Normalize(field string, spec Spec) (Subscription, error) {
	var fields []lock.FieldError
	sub := Subscription{Prefix: spec.Prefix}
	u, fe := p.checkURL(field+"url", spec.URL)
	if fe != nil {
		fields = append(fields, *fe)
	} else {
		sub.URL = u.String()
	}
	if fe := lock.CheckPrefix(field+"prefix", spec.Prefix); fe != nil {
		fields = append(fields, *fe)
	}
	for i, s := range spec.Types {
		t, ok := event.ParseType(s)
		if !ok {
			fields = append(fields, lock.FieldError{Field: fmt.Sprintf("%stypes[%d]", field, i), Detail: fmt.Sprintf("unknown event type %q; known: %s", s, event.TypeList())})
			continue
		}
		if !slices.Contains(sub.Types, t) {
			sub.Types = append(sub.Types, t)
		}
	}
	slices.Sort(sub.Types)
	if len(fields) > 0 {
		return Subscription{}, lock.Invalid(fields...)
	}
	return sub, nil
}

// checkURL checks a receiver URL's form: absolute, https (or http when
// private destinations are allowed), a host, no user info or fragment. An IP
// literal host must be allowed by the policy; a host name is checked when
// it is resolved.
func (p Policy) checkURL(field, raw string) (*url.URL, *lock.FieldError) {
	bad := func(detail string) (*url.URL, *lock.FieldError) {
		return nil, &lock.FieldError{Field: field, Detail: detail}
	}
	if raw == "" {
		return bad("is required")
	}
	if len(raw) > MaxURLLen {
		return bad(fmt.Sprintf("is at most %d characters", MaxURLLen))
	}
	u, err := url.Parse(raw)
	if err != nil || !u.IsAbs() || u.Opaque != "" {
		return bad("must be an absolute URL such as https://ci.example/hooks/lockapi")
	}
	switch u.Scheme {
	case "https":
	case "http":
		if !p.AllowPrivate {
			return bad("must be https (http only with LOCKAPI_WEBHOOKS_ALLOW_PRIVATE=true)")
		}
	default:
		return bad("must be an https URL")
	}
	if u.Hostname() == "" {
		return bad("must name a host")
	}
	if u.User != nil {
		return bad("must not carry user info: the URL is shown to every admin; authenticate receivers by the signature")
	}
	if u.Fragment != "" || u.RawFragment != "" {
		return bad("must not have a fragment")
	}
	if err := p.CheckHost(u.Hostname()); err != nil {
		return bad(err.Error())
	}
	return u, nil
}

// randomBytes returns n random bytes.
func randomBytes(n int) []byte {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return b
}
