// Package force is the force release, the one admin action that both front
// doors offer: the API's "DELETE /v1/locks/{name}" and the dashboard's
// confirmation form. Both call Releaser, so a force release is checked by
// the same rules and counted in lockapi_releases_total{kind="force"}
// whichever door it came through.
//
// Why a service of its own rather than the metrics recorder handed to the
// dashboard: the outcome (did the lock go from held to free?) is known
// where the store answers, and reporting it there, once, is what keeps the
// fronts from drifting. A recorder passed to each front would leave each
// to remember when to count; a third front (a CLI, a second page) would
// be free to forget, as the dashboard once did.
//
// Why only this action: the other admin action of both doors, ending a
// session, needs no package of its own. The dashboard's Sessions page asks
// the API in-process (internal/ui's apiCall, "DELETE /v1/sessions/{id}" as
// the dashboard user's key), so the API's handler is already the one place
// its rules and counting live. The force release form predates apiCall and
// calls Releaser directly; were it to ask the API the same way, Releaser
// would fold into the API's handler and this package would go.
package force

import (
	"context"

	"github.com/lockapi/lockapi/internal/auth"
	"github.com/lockapi/lockapi/internal/lock"
	"github.com/lockapi/lockapi/internal/metrics"
)

// Releaser frees locks whoever holds them, on behalf of an admin key.
type Releaser struct {
	store   lock.Store
	metrics *metrics.Metrics // nil: metrics are off
}

// NewReleaser returns the force release over store, reporting to m (nil:
// metrics are off).
func NewReleaser(store lock.Store, m *metrics.Metrics) *Releaser {
	return &Releaser{store: store, metrics: m}
}

// Release frees lock name whoever holds it, for key (nil: the caller of an
// open server), and reports whether it was held. The name is checked first
// (lock.CodeInvalid), then the key's admin scope and patterns
// (auth.Key.Allow, lock.CodeForbidden), in the order the API answers.
func (f *Releaser) Release(ctx context.Context, key *auth.Key, name string) (released bool, err error) {
	if fe := lock.CheckName("name", name); fe != nil {
		return false, lock.Invalid(*fe)
	}
	if err := key.Allow(auth.ScopeAdmin, name); err != nil {
		return false, err
	}
	principal := ""
	if key != nil {
		principal = key.Principal
	}
	released, err = f.store.ForceRelease(ctx, name, principal)
	if err == nil && released {
		f.metrics.Release(metrics.ReleaseForce)
	}
	return released, err
}
