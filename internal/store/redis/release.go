package redis

import (
	"context"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/lockapi/lockapi/internal/lock"
)

// Renew implements lock.Store.
func (s *Store) Renew(ctx context.Context, ref lock.LeaseRef, ttl time.Duration) (lock.Lease, error) {
	name := ref.Lock
	rec, err := s.journal.recordingFor(ctx, name)
	if err != nil {
		return lock.Lease{}, storeError(err)
	}
	cmd, confirmed := s.write(ctx, "renew", s.scripts.renew, s.keys(name), s.minReplicas, rec, ref.ID, ttl.Milliseconds(), s.channel(name), ref.Principal, s.publish)
	return s.leaseReply(cmd, confirmed, ref, rec, "renewal",
		"if Redis fails over now the lease may end at its earlier expiry: renew again")
}

// leaseReply reads the reply of a script that changes a live lease in
// place and answers with it (renew.lua, update.lua): {0} lost, {-1} another
// principal's, else the lease. what and then name the change in the error
// of a write too few replicas confirmed.
func (s *Store) leaseReply(cmd *goredis.Cmd, confirmed int, ref lock.LeaseRef, rec *recording, what, then string) (lock.Lease, error) {
	name := ref.Lock
	res, err := cmd.Slice()
	if err != nil {
		return lock.Lease{}, storeError(err)
	}
	r := reply(res)
	switch r.int(0) {
	case 0:
		return lock.Lease{}, lock.LeaseLost(name, ref.ID)
	case -1:
		return lock.Lease{}, lock.NotYourLease(name, ref.ID)
	}
	rec.recorded()
	lease := r.lease(name, 1)
	lease.Mode, lease.Limit, lease.Session = lock.Mode(r.str(10)), int(r.int(11)), r.str(12)
	if r.err == nil && confirmed < s.minReplicas {
		return lock.Lease{}, unconfirmed(what, confirmed, s.minReplicas, then)
	}
	return lease, r.err
}

// Release implements lock.Store.
func (s *Store) Release(ctx context.Context, ref lock.LeaseRef, all bool) (lock.ReleaseResult, error) {
	name := ref.Lock
	allArg := "0"
	if all {
		allArg = "1"
	}
	out := lock.ReleaseResult{Lock: name, LeaseID: ref.ID}
	rec, err := s.journal.recordingFor(ctx, name)
	if err != nil {
		return out, storeError(err)
	}
	// The fast script ends the last hold of an exclusive lease; anything
	// else it leaves to the full one.
	cmd, confirmed := s.write(ctx, "release", s.scripts.releaseFast, s.releaseKeys(name), s.minReplicas, rec, ref.ID, ref.Principal, s.channel(name), s.publish)
	if fellBack(cmd) {
		cmd, confirmed = s.write(ctx, "release", s.scripts.release, s.keys(name), s.minReplicas, rec, ref.ID, allArg, s.channel(name), ref.Principal, s.publish)
	}
	if n, err := cmd.Int64(); err == nil && n == 1 {
		// The fast script ended the lease.
		out.Released = true
		rec.recorded()
		return out, s.confirmRelease(confirmed)
	}
	res, err := cmd.Slice()
	if err != nil {
		return out, storeError(err)
	}
	r := reply(res)
	switch r.int(0) {
	case 0:
		return out, lock.LeaseLost(name, ref.ID)
	case -1:
		return out, lock.NotYourLease(name, ref.ID)
	}
	out.HoldCount = int(r.int(1))
	out.Released = r.int(2) == 1
	out.Retried = r.int(3) == 1
	if !out.Retried {
		rec.recorded()
	}
	if r.err != nil {
		return out, r.err
	}
	return out, s.confirmRelease(confirmed)
}

// confirmRelease is the error of a release that fewer replicas confirmed
// than the store asks for.
func (s *Store) confirmRelease(confirmed int) error {
	if confirmed < s.minReplicas {
		return unconfirmed("release", confirmed, s.minReplicas,
			"it took effect on the master, but a failover now could undo it: release again (a repeat is safe)")
	}
	return nil
}

// ForceRelease implements lock.Store.
func (s *Store) ForceRelease(ctx context.Context, name, principal string) (bool, error) {
	rec, err := s.journal.recordingFor(ctx, name)
	if err != nil {
		return false, storeError(err)
	}
	n, err := s.run(ctx, "force_release", s.scripts.forceRelease, s.keys(name), rec, s.channel(name), s.publish, principal).Int()
	if err != nil {
		return false, storeError(err)
	}
	if n == 1 {
		rec.recorded()
	}
	return n == 1, nil
}
