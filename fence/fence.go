// Package fence lets a resource protected by a lockapi lock refuse writes
// from a holder that has lost the lock without knowing it.
//
// A lock holder can pause (GC, swap, a slow network) past its lease; by the
// time it wakes up the lock may belong to someone else. Checking the lease
// before writing does not help, because the pause can come right after the
// check. So lockapi hands out a fencing token with every grant, higher for
// each fresh grant of a lock, and the resource itself enforces the rule:
//
//	Keep the highest token admitted so far. Admit a write whose token is
//	greater than or equal to it, and remember the new token. Refuse a write
//	whose token is lower: it comes from an older holder.
//
// Equal tokens are admitted, because one lease makes many writes with one
// token. Tokens are below 2^53 (MaxToken).
//
// Writers send the token they got with the lock, and the resource checks it
// atomically with the write.
//
// # PostgreSQL
//
// Run the lockapi migrations (package migrations), then call Admit (or
// AdmitPgx) inside the transaction that makes the writes, before them. It
// row-locks the resource's fence until the transaction ends, so a stale and
// a fresh writer can't both commit in the wrong order:
//
//	tx, err := db.BeginTx(ctx, nil)
//	if err != nil {
//		return err
//	}
//	defer tx.Rollback()
//	if err := fence.Admit(ctx, tx, "accounts/7", token); err != nil {
//		return err // fence.ErrStale: the lock has moved on
//	}
//	// ... the writes ...
//	return tx.Commit()
//
// Code that prefers the transaction to fail can call the SQL function
// lockapi_fence_check instead, which raises SQLSTATE LA001 (SQLStateStale).
//
// # Redis
//
// RedisGuard keeps the highest token in a key. Its Write sets a data key in
// the same script, only when the token is admitted.
//
// The fence works only if every writer of the resource goes through it with
// the same resource name (or token key).
package fence

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/lockapi/lockapi/internal/fencing"
)

// MaxToken is the largest token lockapi issues: 2^53-1, exact in a JSON
// number read by JavaScript and in a Lua number in Redis. It is the
// service's own limit (internal/fencing, where the token rule lives), passed on
// as an untyped constant, so that there is one definition and code outside
// this module can still use it.
const MaxToken = fencing.MaxToken

// SQLStateStale is the SQLSTATE that the SQL function lockapi_fence_check
// raises for a stale token.
const SQLStateStale = "LA001"

var (
	// ErrStale means a higher token has already been admitted: the lock was
	// granted to someone else since this token was issued, so the write must
	// not happen.
	ErrStale = errors.New("fence: stale token")

	// ErrTokenRange means the token is above MaxToken and so was not issued
	// by lockapi.
	ErrTokenRange = errors.New("fence: token above 2^53-1")

	// ErrNoResource means the resource name or key is empty.
	ErrNoResource = errors.New("fence: empty resource name")
)

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
// resource wait in Admit. After ErrStale, tx is still usable; roll it back.
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
		return ErrNoResource
	}
	if token > MaxToken {
		return ErrTokenRange
	}
	return nil
}

func admitted(ok bool) error {
	if !ok {
		return ErrStale
	}
	return nil
}
