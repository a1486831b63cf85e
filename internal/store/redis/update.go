package redis

import (
	"context"
	"encoding/json"

	"github.com/lockapi/lockapi/internal/lock"
)

// Update implements lock.Store (update.lua): the lease's metadata is
// replaced in the script that records the updated event, bumps the
// blocking-query index and tells the watchers, all at once. With
// MinReplicas it waits for the replicas as a renewal does: a failover
// that lost the update would show the old metadata again.
func (s *Store) Update(ctx context.Context, ref lock.LeaseRef, metadata map[string]string) (lock.Lease, error) {
	name := ref.Lock
	meta := ""
	if len(metadata) > 0 {
		b, err := json.Marshal(metadata)
		if err != nil {
			return lock.Lease{}, lock.AsError(err)
		}
		meta = string(b)
	}
	rec, err := s.journal.recordingFor(ctx, name)
	if err != nil {
		return lock.Lease{}, storeError(err)
	}
	cmd, confirmed := s.write(ctx, "update", s.scripts.update, s.keys(name), s.minReplicas, rec, ref.ID, meta, s.channel(name), ref.Principal, s.publish)
	return s.leaseReply(cmd, confirmed, ref, rec, "update",
		"if Redis fails over now the lease may show its earlier metadata: update again")
}
