package lock

import (
	"context"
	"encoding/binary"
	"hash/fnv"
	"strconv"
	"time"
)

// SessionIndex is a session's index for blocking queries (GET
// /v1/sessions/{id}?index=): it changes when a lease is bound to the
// session or one of its leases ends, and not when the session is renewed,
// so that a renewal wakes no watcher. The session's end is no index: it is
// answered as an error (CodeSessionLost).
func SessionIndex(s Session) string {
	h := fnv.New64a()
	var b [8]byte
	for _, l := range s.Leases {
		h.Write([]byte(l.Lock))
		h.Write([]byte{0})
		h.Write([]byte(l.LeaseID))
		binary.LittleEndian.PutUint64(b[:], l.Token)
		h.Write(b[:])
	}
	return strconv.FormatUint(h.Sum64(), 36)
}

// WaitSessionChange returns the session as soon as its index differs from
// index, or after wait with the session as it is; without an index, or
// with wait <= 0, at once. A session that ends while it waits is answered
// as GetSession answers it (CodeSessionLost).
//
// It sleeps on the store's watches of the locks the session holds (a bound
// lease that ends publishes there), of SessionWatchName (the session's
// end publishes there) and on a timer at the session's expiry, which
// publishes nothing: while nothing changes it makes no store calls. A
// lease bound to a lock the session did not hold when the wait began wakes
// nothing: it is seen at the next wake-up or the wait's end (an SDK that
// binds a lease asks again).
func WaitSessionChange(ctx context.Context, s Store, ss Sessions, ref SessionRef, index string, wait time.Duration) (Session, error) {
	sess, err := ss.GetSession(ctx, ref)
	if err != nil || index == "" || SessionIndex(sess) != index || wait <= 0 {
		return sess, err
	}
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	sw := &sessionWatch{s: s, wake: make(chan struct{}, 1), watched: make(map[string]bool)}
	defer sw.close()
	names := []string{SessionWatchName(ref.ID)}
	for {
		for _, l := range sess.Leases {
			names = append(names, l.Lock)
		}
		if err := sw.watch(ctx, names); err != nil {
			return Session{}, err
		}
		// Look again now that the watches are in effect: a change between
		// the last read and them must not be missed.
		sess, err = ss.GetSession(ctx, ref)
		if err != nil || SessionIndex(sess) != index {
			return sess, err
		}
		// Nothing publishes the session's expiry: look again then (not
		// sooner than minExpiryLook, should the store's clock be behind).
		expiry := time.NewTimer(max(time.Until(sess.ExpiresAt)+time.Millisecond, minExpiryLook))
		select {
		case <-sw.wake:
		case <-expiry.C:
		case <-deadline.C:
			expiry.Stop()
			return sess, nil
		case <-ctx.Done():
			expiry.Stop()
			return Session{}, ctx.Err()
		}
		expiry.Stop()
		names = names[:0]
	}
}

// SessionWatchName is the name whose watchers a store wakes when session
// id ends (EndSession), for WaitSessionChange: a reserved name, which no
// lock has.
func SessionWatchName(id string) string { return ReservedPrefix + "session." + id }

// minExpiryLook is the least time between two looks at a session whose
// expiry has come by this host's clock but not by the store's.
const minExpiryLook = 20 * time.Millisecond

// sessionWatch is WaitSessionChange's watches: one per lock the session
// holds, each ringing wake.
type sessionWatch struct {
	s       Store
	wake    chan struct{}
	ws      []Watcher
	watched map[string]bool
}

// watch adds a watch of each of names not watched yet, and takes in the
// wake-ups so far: a change after it rings wake.
func (sw *sessionWatch) watch(ctx context.Context, names []string) error {
	ring := func() {
		select {
		case sw.wake <- struct{}{}:
		default:
		}
	}
	for _, name := range names {
		if sw.watched[name] {
			continue
		}
		w, err := sw.s.Watch(ctx, name, WatchChanges)
		if err != nil {
			return err
		}
		w.Notify(ring)
		sw.ws = append(sw.ws, w)
		sw.watched[name] = true
	}
	// A watcher's channel holds one wake-up, and while it is full the next
	// change rings nothing: empty them all before the look that follows.
	for _, w := range sw.ws {
		select {
		case <-w.C():
		default:
		}
	}
	select {
	case <-sw.wake:
	default:
	}
	return nil
}

func (sw *sessionWatch) close() {
	for _, w := range sw.ws {
		w.Notify(nil)
		w.Close()
	}
}
