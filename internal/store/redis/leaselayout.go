package redis

import (
	"errors"
	"strings"

	goredis "github.com/redis/go-redis/v9"

	"github.com/lockapi/lockapi/internal/layout"
	"github.com/lockapi/lockapi/internal/lock"
)

// A lock's records (the lock hash, the fence, each shared lease's or
// permit's record) carry their layout, v (layout.LeasesV1; none is the
// same, as v0.1.0 wrote them). The scripts read it with the records and
// refuse one they do not know with the error "LAYOUT leases <v>"
// (lease_layout in scripts/lib.lua), before they read the lock as free or
// write over it; inspect.lua hands the shared records over as they are,
// and sharedHolder reads theirs. Either way the call is answered
// errLeaseLayout and told to the runner's layout.Unknown.

// errLeaseLayout answers a call on a lock whose records were written in a
// layout this version does not know: a newer instance serves it.
var errLeaseLayout = &lock.Error{Code: lock.CodeUnavailable,
	Detail: "this lock is held in Redis by a newer lockapi, in a layout this instance does not know: a newer instance serves it (docs/UPGRADING.md)"}

// leaseLayout is the layout of a shared record that sharedHolder does not
// know.
type leaseLayout string

func (v leaseLayout) Error() string {
	return "store: a shared lease record of layout " + string(v)
}

// unknownLeaseLayout reports whether err is the refusal of a lock's
// record of a layout this version does not know, and that layout ("?"
// for one that is not plain, layout.Plain).
func unknownLeaseLayout(err error) (string, bool) {
	var v leaseLayout
	if errors.As(err, &v) {
		return plainLayout(string(v)), true
	}
	var rerr goredis.Error
	if !errors.As(err, &rerr) {
		return "", false
	}
	// Redis appends where the script raised it: "LAYOUT leases 2 script: ...".
	rest, ok := strings.CutPrefix(rerr.Error(), "LAYOUT leases ")
	if !ok {
		return "", false
	}
	v2, _, _ := strings.Cut(rest, " ")
	return plainLayout(v2), true
}

func plainLayout(v string) string {
	if !layout.Plain(v) {
		return "?"
	}
	return v
}

// noteLayout tells of a lock's record of a layout this version does not
// know, which err reports; at names it (the lock hash's key).
func (s *runner) noteLayout(err error, at string) {
	if v, ok := unknownLeaseLayout(err); ok {
		s.unknown.Tell(layout.Leases, v, at)
	}
}

// firstKey is a script call's first key, which names the record it is on.
func firstKey(keys []string) string {
	if len(keys) == 0 {
		return ""
	}
	return keys[0]
}
