// Package migrations is the schema of the PostgreSQL fencing guard
// (package github.com/lockapi/lockapi/fence/postgres: the lockapi_fence
// table and the lockapi_fence_admit and lockapi_fence_check functions),
// versioned, and a small runner for it. lockapi itself keeps nothing in
// PostgreSQL: only resources guarded with fence/postgres need it.
//
// Each migration is a pair of files NNNN_name.up.sql and NNNN_name.down.sql,
// embedded in the binary. Up applies the missing ones in version order, Down
// undoes the latest ones. Applied versions are recorded in the
// lockapi_schema_migrations table. Every migration runs in its own
// transaction together with its bookkeeping, under a transaction-scoped
// advisory lock, so a failed migration leaves nothing behind and two
// processes running Up at once apply each migration once.
package migrations

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strconv"
	"strings"
)

//go:embed *.sql
var files embed.FS

// Table records applied versions.
const Table = "lockapi_schema_migrations"

// lockKey is the pg_advisory_xact_lock key that serializes runners on one
// database: "lockapi" in ASCII.
const lockKey = 0x6c6f636b617069

// Migration is one schema version.
type Migration struct {
	Version int    // from the file name, 1 for 0001_fencing.up.sql
	Name    string // "fencing"
	Up      string // SQL applying the version
	Down    string // SQL undoing it
}

// All returns the embedded migrations in version order.
func All() ([]Migration, error) {
	entries, err := fs.ReadDir(files, ".")
	if err != nil {
		return nil, err
	}
	byVersion := map[int]*Migration{}
	for _, e := range entries {
		base, up := strings.CutSuffix(e.Name(), ".up.sql")
		if !up {
			var down bool
			if base, down = strings.CutSuffix(e.Name(), ".down.sql"); !down {
				return nil, fmt.Errorf("migrations: %s: name must end in .up.sql or .down.sql", e.Name())
			}
		}
		digits, name, ok := strings.Cut(base, "_")
		v, err := strconv.Atoi(digits)
		if !ok || err != nil || v <= 0 || name == "" {
			return nil, fmt.Errorf("migrations: %s: name must look like 0001_name.up.sql", e.Name())
		}
		b, err := files.ReadFile(e.Name())
		if err != nil {
			return nil, err
		}
		m := byVersion[v]
		if m == nil {
			m = &Migration{Version: v, Name: name}
			byVersion[v] = m
		}
		if m.Name != name {
			return nil, fmt.Errorf("migrations: version %d has two names, %q and %q", v, m.Name, name)
		}
		if up {
			m.Up = string(b)
		} else {
			m.Down = string(b)
		}
	}
	all := make([]Migration, 0, len(byVersion))
	for _, m := range byVersion {
		if m.Up == "" || m.Down == "" {
			return nil, fmt.Errorf("migrations: %04d_%s needs both an .up.sql and a .down.sql file", m.Version, m.Name)
		}
		all = append(all, *m)
	}
	slices.SortFunc(all, func(a, b Migration) int { return a.Version - b.Version })
	return all, nil
}

// Up applies every migration not yet recorded in Table, in version order,
// each in its own transaction. Running it again does nothing.
func Up(ctx context.Context, db *sql.DB) error {
	all, err := All()
	if err != nil {
		return err
	}
	if err := inTx(ctx, db, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS `+Table+` (
			version    bigint PRIMARY KEY,
			name       text NOT NULL,
			applied_at timestamptz NOT NULL DEFAULT now()
		)`)
		return err
	}); err != nil {
		return fmt.Errorf("migrations: create %s: %w", Table, err)
	}
	for _, m := range all {
		err := inTx(ctx, db, func(tx *sql.Tx) error {
			var applied bool
			err := tx.QueryRowContext(ctx,
				`SELECT EXISTS (SELECT 1 FROM `+Table+` WHERE version = $1)`, m.Version).Scan(&applied)
			if err != nil || applied {
				return err
			}
			if _, err := tx.ExecContext(ctx, m.Up); err != nil {
				return err
			}
			_, err = tx.ExecContext(ctx,
				`INSERT INTO `+Table+` (version, name) VALUES ($1, $2)`, m.Version, m.Name)
			return err
		})
		if err != nil {
			return fmt.Errorf("migrations: up %04d_%s: %w", m.Version, m.Name, err)
		}
	}
	return nil
}

// Down undoes the latest steps applied migrations, newest first, each in its
// own transaction. It stops early, without error, once none is left. A
// recorded version this binary has no files for is an error: it was applied
// by a newer lockapi, and only that one knows how to undo it.
func Down(ctx context.Context, db *sql.DB, steps int) error {
	if steps < 1 {
		return fmt.Errorf("migrations: down %d steps: need at least 1", steps)
	}
	all, err := All()
	if err != nil {
		return err
	}
	for range steps {
		done := false
		err := inTx(ctx, db, func(tx *sql.Tx) error {
			v, err := version(ctx, tx)
			if err != nil || v == 0 {
				done = true
				return err
			}
			i := slices.IndexFunc(all, func(m Migration) bool { return m.Version == v })
			if i < 0 {
				return fmt.Errorf("migrations: down %d: no such migration in this binary", v)
			}
			m := all[i]
			if _, err := tx.ExecContext(ctx, m.Down); err != nil {
				return fmt.Errorf("migrations: down %04d_%s: %w", m.Version, m.Name, err)
			}
			_, err = tx.ExecContext(ctx, `DELETE FROM `+Table+` WHERE version = $1`, v)
			return err
		})
		if err != nil {
			return err
		}
		if done {
			return nil
		}
	}
	return nil
}

// Version returns the highest applied version, 0 when none is (or Table
// does not exist yet).
func Version(ctx context.Context, db *sql.DB) (int, error) {
	var v int
	err := inTx(ctx, db, func(tx *sql.Tx) error {
		var err error
		v, err = version(ctx, tx)
		return err
	})
	return v, err
}

func version(ctx context.Context, tx *sql.Tx) (int, error) {
	var exists bool
	if err := tx.QueryRowContext(ctx, `SELECT to_regclass($1) IS NOT NULL`, Table).Scan(&exists); err != nil || !exists {
		return 0, err
	}
	var v int
	err := tx.QueryRowContext(ctx, `SELECT coalesce(max(version), 0) FROM `+Table).Scan(&v)
	return v, err
}

// inTx runs fn in a transaction holding the runner's advisory lock, and
// commits if fn succeeds.
func inTx(ctx context.Context, db *sql.DB, fn func(*sql.Tx) error) (err error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, ignoreDone(tx.Rollback()))
		}
	}()
	if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(lockKey)); err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		return err
	}
	return tx.Commit()
}

// ignoreDone drops the error a Rollback reports when the transaction has
// already ended, for example after a failed Commit.
func ignoreDone(err error) error {
	if errors.Is(err, sql.ErrTxDone) {
		return nil
	}
	return err
}
