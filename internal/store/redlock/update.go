package redlock

import (
	"context"

	"github.com/lockapi/lockapi/internal/lock"
)

// Update implements lock.Store: it is not offered in redlock mode
// (lock.CodeUnsupported, 501). A lease's metadata would be one copy per
// master, and an update that reached a majority leaves a minority with the
// old copy: Inspect merges the masters' views by lease and could answer
// either, so a leader's proclaimed value could seem to go back. Nor is
// there an event log to carry the updated event (docs/ELECTIONS.md).
func (s *Store) Update(ctx context.Context, ref lock.LeaseRef, metadata map[string]string) (lock.Lease, error) {
	return lock.Lease{}, lock.Unsupported("updating a lease's metadata is not offered in redlock mode: each master keeps its own copy, and readers could see an old one after an update reached only a majority; acquire with the metadata instead")
}
