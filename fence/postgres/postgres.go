// Package postgres fences a resource kept in PostgreSQL: see package
// [github.com/lockapi/lockapi/fence] for the rule.
//
// Run the lockapi migrations (package
// [github.com/lockapi/lockapi/migrations], this guard's schema), then call
// Admit (or AdmitPgx) inside the transaction that makes the writes, before
// them. It row-locks the resource's fence until the transaction ends, so a
// stale and a fresh writer can't both commit in the wrong order:
//
//	tx, err := db.BeginTx(ctx, nil)
//	if err != nil {
//		return err
//	}
//	defer tx.Rollback()
//	if err := postgres.Admit(ctx, tx, "accounts/7", token); err != nil {
//		return err // fence.ErrStale: the lock has moved on
//	}
//	// ... the writes ...
//	return tx.Commit()
//
// Code that prefers the transaction to fail can call the SQL function
// lockapi_fence_check instead, which raises SQLSTATE LA001 (SQLStateStale).
package postgres

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/lockapi/lockapi/fence"
)

// SQLStateStale is the SQLSTATE that the SQL function lockapi_fence_check
// raises for a stale token.
const SQLStateStale = "LA001"

// Tx is the part of *sql.Tx that Admit needs. Commit and Rollback are never
// called: they are there so that only a transaction fits, not a *sql.DB,
// whose statements each run in a transaction of their own and would drop the
// fence's row lock at once.
type Tx interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	Commit() error
	Rollback() error
}

const admitSQL = `SELECT lockapi_fence_admit($1, $2)`

// Admit admits token for resource in the database/sql transaction tx, or
// returns ErrStale if a higher token was admitted before. It needs the
// lockapi migrations (package migrations) in the database.
//
// Call it before the writes it guards. Until tx commits or rolls back, it
// holds a row lock that makes any other transaction fencing the same
// resource wait in Admit. After fence.ErrStale, tx is still usable; roll it back.
func Admit(ctx context.Context, tx Tx, resource string, token uint64) error {
	if err := validate(resource, token); err != nil {
		return err
	}
	var ok bool
	if err := tx.QueryRowContext(ctx, admitSQL, resource, int64(token)).Scan(&ok); err != nil {
		return fmt.Errorf("fence: admit token %d for %q: %w", token, resource, err)
	}
	return admitted(ok)
}

// AdmitPgx is Admit for a pgx transaction (pgx.Tx from a *pgx.Conn or a
// pgxpool.Pool).
func AdmitPgx(ctx context.Context, tx pgx.Tx, resource string, token uint64) error {
	if err := validate(resource, token); err != nil {
		return err
	}
	var ok bool
	if err := tx.QueryRow(ctx, admitSQL, resource, int64(token)).Scan(&ok); err != nil {
		return fmt.Errorf("fence: admit token %d for %q: %w", token, resource, err)
	}
	return admitted(ok)
}

func validate(resource string, token uint64) error {
	if resource == "" {
		return fence.ErrNoResource
	}
	if token > fence.MaxToken {
		return fence.ErrTokenRange
	}
	return nil
}

func admitted(ok bool) error {
	if !ok {
		return fence.ErrStale
	}
	return nil
}
