package store_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/lockapi/lockapi/internal/lock"
	"github.com/lockapi/lockapi/internal/store"
	"github.com/lockapi/lockapi/internal/testkit/redistest"
)

// conformance lists every TestStore_ function, so that TestTopologies can
// run the suite on Sentinel and Cluster; TestConformance_list_is_complete
// keeps it whole.
var conformance = []struct {
	name string
	fn   func(*testing.T)
}{
	{"AcquireRelease", TestStore_AcquireRelease},
	{"Inspect_free_lock_is_not_an_error", TestStore_Inspect_free_lock_is_not_an_error},
	{"Reentrant", TestStore_Reentrant},
	{"Reentrancy_is_per_principal", TestStore_Reentrancy_is_per_principal},
	{"Only_the_acquiring_principal_renews_and_releases", TestStore_Only_the_acquiring_principal_renews_and_releases},
	{"ReleaseAll", TestStore_ReleaseAll},
	{"Held_by_another", TestStore_Held_by_another},
	{"Wrong_lease_changes_nothing", TestStore_Wrong_lease_changes_nothing},
	{"Renew", TestStore_Renew},
	{"Expiry_frees_and_late_holder_is_lost", TestStore_Expiry_frees_and_late_holder_is_lost},
	{"Waiter_sees_a_shortened_lease", TestStore_Waiter_sees_a_shortened_lease},
	{"Release_retry_is_idempotent", TestStore_Release_retry_is_idempotent},
	{"ForceRelease", TestStore_ForceRelease},
	{"List_prefix_and_cursor", TestStore_List_prefix_and_cursor},
	{"Tokens_strictly_increase", TestStore_Tokens_strictly_increase},
	{"Tokens_survive_data_loss", TestStore_Tokens_survive_data_loss},
	{"Seed_waiter_is_woken_by_release", TestStore_Seed_waiter_is_woken_by_release},
	{"Seed_two_waiters_one_at_a_time", TestStore_Seed_two_waiters_one_at_a_time},
	{"Seed_wait_timeout", TestStore_Seed_wait_timeout},
	{"Seed_wait_cancelled", TestStore_Seed_wait_cancelled},
	{"Seed_concurrent_acquirers_one_wins", TestStore_Seed_concurrent_acquirers_one_wins},
	{"Seed_sequential_cycles_on_distinct_names", TestStore_Seed_sequential_cycles_on_distinct_names},
	{"Kleppmann", TestStore_Kleppmann},
	{"Idempotency_key_replays_the_grant", TestStore_Idempotency_key_replays_the_grant},
	{"Abandon", TestStore_Abandon},
}

// TestTopologies runs the conformance suite on a Sentinel set (one master,
// one replica, three sentinels) and on a Redis Cluster (three masters, three
// replicas), each batched and not, started once for all of it.
func TestTopologies(t *testing.T) {
	if testing.Short() {
		t.Skip("starts multi-node Redis topologies")
	}
	sentinel := redistest.StartSentinel(t)
	cluster := redistest.StartCluster(t)
	for _, b := range []backend{
		{name: "sentinel", open: func(t *testing.T) lock.Store {
			return openStore(t, store.ClientConfig{URL: sentinel.URL(), Mode: store.ModeSentinel}, false)
		}},
		{name: "sentinel-batched", open: func(t *testing.T) lock.Store {
			return openStore(t, store.ClientConfig{URL: sentinel.URL(), Mode: store.ModeSentinel}, true)
		}},
		{name: "cluster", open: func(t *testing.T) lock.Store {
			return openStore(t, store.ClientConfig{URL: cluster.URL(), Mode: store.ModeCluster}, false)
		}},
		{name: "cluster-batched", open: func(t *testing.T) lock.Store {
			return openStore(t, store.ClientConfig{URL: cluster.URL(), Mode: store.ModeCluster}, true)
		}},
	} {
		t.Run(b.name, func(t *testing.T) {
			topology = &b
			defer func() { topology = nil }()
			for _, c := range conformance {
				t.Run(c.name, c.fn)
			}
		})
	}
}

// TestConformance_list_is_complete fails when a TestStore_ function is
// missing from conformance, so a new behaviour cannot skip the topologies.
func TestConformance_list_is_complete(t *testing.T) {
	files, err := filepath.Glob("*_test.go")
	if err != nil {
		t.Fatal(err)
	}
	listed := make([]string, 0, len(conformance))
	for _, c := range conformance {
		listed = append(listed, "TestStore_"+c.name)
	}
	fset := token.NewFileSet()
	for _, f := range files {
		file, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range file.Decls {
			if fn, ok := d.(*ast.FuncDecl); ok && strings.HasPrefix(fn.Name.Name, "TestStore_") && !slices.Contains(listed, fn.Name.Name) {
				t.Errorf("%s (%s) is not in the conformance list of topology_test.go", fn.Name.Name, f)
			}
		}
	}
}
