package migrations_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/lockapi/lockapi/internal/testkit/pgtest"
	"github.com/lockapi/lockapi/migrations"
)

func TestAll(t *testing.T) {
	all, err := migrations.All()
	if err != nil {
		t.Fatal(err)
	}
	if len(all) == 0 || all[0].Version != 1 || all[0].Name != "fencing" {
		t.Fatalf("All() starts with %+v, want version 1 \"fencing\"", all)
	}
	for i, m := range all {
		if m.Version != i+1 {
			t.Errorf("migration %d has version %d: versions must be 1, 2, 3, ... without gaps", i, m.Version)
		}
	}
}

func TestUp_Down_Up(t *testing.T) {
	db := pgtest.Start(t).DB(t)
	ctx := context.Background()
	latest := latestVersion(t)

	t.Run("OK_twice", func(t *testing.T) {
		for range 2 {
			if err := migrations.Up(ctx, db); err != nil {
				t.Fatal(err)
			}
		}
		wantSchema(t, db, true)
		wantVersion(t, db, latest)
		var rows int
		if err := db.QueryRowContext(ctx, `SELECT count(*) FROM `+migrations.Table).Scan(&rows); err != nil {
			t.Fatal(err)
		}
		if rows != latest {
			t.Errorf("%s has %d rows after Up twice, want %d", migrations.Table, rows, latest)
		}
	})

	t.Run("Down_removes_table_and_functions", func(t *testing.T) {
		if err := migrations.Down(ctx, db, latest); err != nil {
			t.Fatal(err)
		}
		wantSchema(t, db, false)
		wantVersion(t, db, 0)
		// Nothing left to undo: not an error.
		if err := migrations.Down(ctx, db, 1); err != nil {
			t.Fatalf("Down with nothing applied: %v", err)
		}
	})

	t.Run("Up_again", func(t *testing.T) {
		if err := migrations.Up(ctx, db); err != nil {
			t.Fatal(err)
		}
		wantSchema(t, db, true)
		wantVersion(t, db, latest)
		var ok bool
		if err := db.QueryRowContext(ctx, `SELECT lockapi_fence_admit('r', 1)`).Scan(&ok); err != nil || !ok {
			t.Fatalf("lockapi_fence_admit after Up again = %v, %v; want true", ok, err)
		}
	})
}

func TestUp_concurrent(t *testing.T) {
	db := pgtest.Start(t).DB(t)
	ctx := context.Background()
	errs := make(chan error, 4)
	for range cap(errs) {
		go func() { errs <- migrations.Up(ctx, db) }()
	}
	for range cap(errs) {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	wantVersion(t, db, latestVersion(t))
}

func TestDown_ErrSteps(t *testing.T) {
	if err := migrations.Down(context.Background(), nil, 0); err == nil {
		t.Fatal("Down with 0 steps succeeded")
	}
}

func latestVersion(t *testing.T) int {
	t.Helper()
	all, err := migrations.All()
	if err != nil {
		t.Fatal(err)
	}
	return all[len(all)-1].Version
}

func wantVersion(t *testing.T, db *sql.DB, want int) {
	t.Helper()
	got, err := migrations.Version(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Errorf("Version = %d, want %d", got, want)
	}
}

// wantSchema checks that the fence table and functions exist, or not.
func wantSchema(t *testing.T, db *sql.DB, want bool) {
	t.Helper()
	for _, obj := range []struct{ query, name string }{
		{`SELECT to_regclass($1) IS NOT NULL`, "lockapi_fence"},
		{`SELECT to_regprocedure($1) IS NOT NULL`, "lockapi_fence_admit(text, bigint)"},
		{`SELECT to_regprocedure($1) IS NOT NULL`, "lockapi_fence_check(text, bigint)"},
	} {
		var got bool
		if err := db.QueryRowContext(context.Background(), obj.query, obj.name).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("%s exists = %v, want %v", obj.name, got, want)
		}
	}
}
