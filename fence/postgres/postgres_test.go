package postgres_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/lockapi/lockapi/fence"
	"github.com/lockapi/lockapi/fence/postgres"
	"github.com/lockapi/lockapi/internal/testkit/pgtest"
	"github.com/lockapi/lockapi/migrations"
)

// openDB returns a fresh migrated database and its URL, with a test table
// accounts(id, balance, written_by_token) that fenced writers update.
func openDB(t *testing.T) (*sql.DB, string) {
	t.Helper()
	url := pgtest.Start(t).NewDatabase(t)
	db := pgtest.Open(t, url)
	ctx := context.Background()
	if err := migrations.Up(ctx, db); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE accounts (
		id               int PRIMARY KEY,
		balance          bigint NOT NULL,
		written_by_token bigint NOT NULL
	)`); err != nil {
		t.Fatal(err)
	}
	return db, url
}

// admitIn runs Admit in a transaction of its own and commits it if admitted.
func admitIn(t *testing.T, db *sql.DB, resource string, token uint64) error {
	t.Helper()
	ctx := context.Background()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if err := postgres.Admit(ctx, tx, resource, token); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	return nil
}

func TestAdmit(t *testing.T) {
	db, _ := openDB(t)

	t.Run("OK_first_token", func(t *testing.T) {
		if err := admitIn(t, db, "first", 7); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("ErrStale_41_after_42", func(t *testing.T) {
		if err := admitIn(t, db, "stale", 42); err != nil {
			t.Fatal(err)
		}
		if err := admitIn(t, db, "stale", 41); !errors.Is(err, fence.ErrStale) {
			t.Fatalf("token 41 after 42: err = %v, want ErrStale", err)
		}
		// The refusal changed nothing: 42 still passes.
		if err := admitIn(t, db, "stale", 42); err != nil {
			t.Fatalf("token 42 after the refused 41: %v", err)
		}
	})

	t.Run("OK_equal_42_twice", func(t *testing.T) {
		for i := range 2 {
			if err := admitIn(t, db, "equal", 42); err != nil {
				t.Fatalf("token 42, time %d: %v", i+1, err)
			}
		}
		// And twice in one transaction, as one lease's many writes do.
		ctx := context.Background()
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		for i := range 2 {
			if err := postgres.Admit(ctx, tx, "equal", 42); err != nil {
				t.Fatalf("token 42 in one transaction, time %d: %v", i+1, err)
			}
		}
	})

	t.Run("OK_after_rolled_back_higher_token", func(t *testing.T) {
		ctx := context.Background()
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := postgres.Admit(ctx, tx, "rollback", 42); err != nil {
			t.Fatal(err)
		}
		if err := tx.Rollback(); err != nil {
			t.Fatal(err)
		}
		// 42's transaction never happened, so neither did its admission.
		if err := admitIn(t, db, "rollback", 41); err != nil {
			t.Fatalf("token 41 after 42 rolled back: %v", err)
		}
	})

	t.Run("OK_large_tokens_differ_by_one", func(t *testing.T) {
		if err := admitIn(t, db, "large", fence.MaxToken); err != nil {
			t.Fatal(err)
		}
		if err := admitIn(t, db, "large", fence.MaxToken-1); !errors.Is(err, fence.ErrStale) {
			t.Fatalf("MaxToken-1 after MaxToken: err = %v, want ErrStale", err)
		}
	})

	t.Run("ErrTokenRange", func(t *testing.T) {
		if err := admitIn(t, db, "range", fence.MaxToken+1); !errors.Is(err, fence.ErrTokenRange) {
			t.Fatalf("err = %v, want ErrTokenRange", err)
		}
	})

	t.Run("ErrNoResource", func(t *testing.T) {
		if err := admitIn(t, db, "", 1); !errors.Is(err, fence.ErrNoResource) {
			t.Fatalf("err = %v, want ErrNoResource", err)
		}
	})
}

func TestAdmitPgx(t *testing.T) {
	_, url := openDB(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })

	admit := func(token uint64) error {
		t.Helper()
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		if err := postgres.AdmitPgx(ctx, tx, "pgx", token); err != nil {
			return err
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		return nil
	}
	if err := admit(42); err != nil {
		t.Fatal(err)
	}
	if err := admit(42); err != nil {
		t.Fatalf("token 42 again: %v", err)
	}
	if err := admit(41); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("token 41 after 42: err = %v, want ErrStale", err)
	}
	if err := admit(43); err != nil {
		t.Fatalf("token 43: %v", err)
	}
}

// TestCheck_raises_LA001 covers lockapi_fence_check, for callers who want a
// stale token to fail the whole transaction.
func TestCheck_raises_LA001(t *testing.T) {
	db, _ := openDB(t)
	ctx := context.Background()
	if err := admitIn(t, db, "check", 42); err != nil {
		t.Fatal(err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `SELECT lockapi_fence_check($1, $2)`, "check", 42); err != nil {
		t.Fatalf("check with token 42: %v", err)
	}
	_, err = tx.ExecContext(ctx, `SELECT lockapi_fence_check($1, $2)`, "check", 41)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != postgres.SQLStateStale {
		t.Fatalf("check with token 41: err = %v, want SQLSTATE %s", err, postgres.SQLStateStale)
	}
	t.Logf("stale check says: %s (hint: %s)", pgErr.Message, pgErr.Hint)
	// The transaction is aborted: the stale writer can't write.
	_, err = tx.ExecContext(ctx, `INSERT INTO accounts VALUES (1, 0, 41)`)
	if !errors.As(err, &pgErr) || pgErr.Code != "25P02" {
		t.Fatalf("write after a failed check: err = %v, want SQLSTATE 25P02 (in_failed_sql_transaction)", err)
	}
}

// writer is one fenced writer's transaction.
type writer struct {
	token uint64
	tx    *sql.Tx
	pid   int // its backend, to see whom it waits for
}

func begin(t *testing.T, db *sql.DB, token uint64) *writer {
	t.Helper()
	ctx := context.Background()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback() })
	w := &writer{token: token, tx: tx}
	if err := tx.QueryRowContext(ctx, `SELECT pg_backend_pid()`).Scan(&w.pid); err != nil {
		t.Fatal(err)
	}
	return w
}

// admitAsync runs Admit for w in a goroutine; the channel gets its result.
// w must not be used until it has.
func (w *writer) admitAsync(resource string) <-chan error {
	done := make(chan error, 1)
	go func() { done <- postgres.Admit(context.Background(), w.tx, resource, w.token) }()
	return done
}

// write is the guarded work after Admit: it reads which token last wrote
// account id, then overwrites the account.
func (w *writer) write(id int) (seen int64, err error) {
	ctx := context.Background()
	err = w.tx.QueryRowContext(ctx,
		`SELECT written_by_token FROM accounts WHERE id = $1 FOR UPDATE`, id).Scan(&seen)
	if err != nil {
		return 0, err
	}
	_, err = w.tx.ExecContext(ctx,
		`UPDATE accounts SET balance = $2, written_by_token = $3 WHERE id = $1`,
		id, int64(w.token)*10, int64(w.token))
	return seen, err
}

// waitBlocked returns once Postgres reports waiter's backend waiting for a
// lock that holder's transaction holds.
func waitBlocked(t *testing.T, db *sql.DB, waiter, holder *writer, admitted <-chan error) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var blocked bool
		err := db.QueryRowContext(context.Background(),
			`SELECT $2::int = ANY(pg_blocking_pids($1))`, waiter.pid, holder.pid).Scan(&blocked)
		if err != nil {
			t.Fatal(err)
		}
		if blocked {
			return
		}
		select {
		case err := <-admitted:
			t.Fatalf("token %d: Admit returned (%v) while token %d holds the fence", waiter.token, err, holder.token)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("token %d's backend never waited for token %d's", waiter.token, holder.token)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// account returns who wrote account id last, as committed.
func account(t *testing.T, db *sql.DB, id int) (balance, writtenBy int64) {
	t.Helper()
	err := db.QueryRowContext(context.Background(),
		`SELECT balance, written_by_token FROM accounts WHERE id = $1`, id).Scan(&balance, &writtenBy)
	if err != nil {
		t.Fatal(err)
	}
	return balance, writtenBy
}

func newAccount(t *testing.T, db *sql.DB, id int) {
	t.Helper()
	if _, err := db.ExecContext(context.Background(),
		`INSERT INTO accounts (id, balance, written_by_token) VALUES ($1, 0, 0)`, id); err != nil {
		t.Fatal(err)
	}
}

// TestAdmit_race_stale_holds_fence_first forces this order: the stale writer
// (41) is admitted first and holds the fence; the fresh writer (42) must wait
// in Admit until 41 has committed, so 42 writes on top of 41, never under it.
func TestAdmit_race_stale_holds_fence_first(t *testing.T) {
	db, _ := openDB(t)
	const id, resource = 1, "accounts/1"
	newAccount(t, db, id)
	// The fence row exists, as it does for any resource written before, so
	// the wait below is on its row lock.
	if err := admitIn(t, db, resource, 40); err != nil {
		t.Fatal(err)
	}

	w41 := begin(t, db, 41)
	if err := postgres.Admit(context.Background(), w41.tx, resource, 41); err != nil {
		t.Fatal(err)
	}
	w42 := begin(t, db, 42)
	admitted42 := w42.admitAsync(resource)
	waitBlocked(t, db, w42, w41, admitted42)

	if _, err := w41.write(id); err != nil {
		t.Fatal(err)
	}
	if err := w41.tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := <-admitted42; err != nil {
		t.Fatalf("token 42 after 41 committed: %v", err)
	}
	seen, err := w42.write(id)
	if err != nil {
		t.Fatal(err)
	}
	if err := w42.tx.Commit(); err != nil {
		t.Fatal(err)
	}

	if seen != 41 {
		t.Errorf("42 saw the account written by %d once admitted, want 41: 41 must commit before 42 is admitted", seen)
	}
	if balance, by := account(t, db, id); by != 42 || balance != 420 {
		t.Errorf("account = (balance %d, by %d), want 42's (420, 42)", balance, by)
	}
}

// TestAdmit_race_fresh_holds_fence_first forces the other order: the fresh
// writer (42) is admitted and writes first; the stale one (41) waits in Admit
// and, once 42 commits, is refused.
func TestAdmit_race_fresh_holds_fence_first(t *testing.T) {
	db, _ := openDB(t)
	const id, resource = 1, "accounts/1"
	newAccount(t, db, id)
	// The fence row exists, as it does for any resource written before, so
	// the wait below is on its row lock.
	if err := admitIn(t, db, resource, 40); err != nil {
		t.Fatal(err)
	}

	w42 := begin(t, db, 42)
	if err := postgres.Admit(context.Background(), w42.tx, resource, 42); err != nil {
		t.Fatal(err)
	}
	if _, err := w42.write(id); err != nil {
		t.Fatal(err)
	}
	w41 := begin(t, db, 41)
	admitted41 := w41.admitAsync(resource)
	waitBlocked(t, db, w41, w42, admitted41)

	if err := w42.tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := <-admitted41; !errors.Is(err, fence.ErrStale) {
		t.Fatalf("token 41 after 42 committed: err = %v, want ErrStale", err)
	}
	if err := w41.tx.Rollback(); err != nil {
		t.Fatal(err)
	}

	if balance, by := account(t, db, id); by != 42 || balance != 420 {
		t.Errorf("account = (balance %d, by %d), want 42's (420, 42)", balance, by)
	}
}

// TestAdmit_race_free lets 41 and 42 race with no forced order, many times.
// Whoever wins, the committed account is 42's, and if 41 committed, 42 saw
// 41's write once admitted: 41 committed first.
func TestAdmit_race_free(t *testing.T) {
	db, _ := openDB(t)
	db.SetMaxOpenConns(4)

	type result struct {
		committed bool
		seen      int64
		err       error
	}
	run := func(id int, token uint64, start <-chan struct{}) result {
		<-start
		ctx := context.Background()
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return result{err: err}
		}
		defer tx.Rollback()
		if err := postgres.Admit(ctx, tx, fmt.Sprintf("accounts/%d", id), token); errors.Is(err, fence.ErrStale) {
			return result{}
		} else if err != nil {
			return result{err: err}
		}
		w := &writer{token: token, tx: tx}
		seen, err := w.write(id)
		if err == nil {
			err = tx.Commit()
		}
		return result{committed: err == nil, seen: seen, err: err}
	}

	const rounds = 100
	stale41 := 0
	for id := range rounds {
		newAccount(t, db, id)
		if id%2 == 0 { // half the rounds with an existing fence row
			if err := admitIn(t, db, fmt.Sprintf("accounts/%d", id), 40); err != nil {
				t.Fatal(err)
			}
		}
		start := make(chan struct{})
		r41, r42 := make(chan result, 1), make(chan result, 1)
		go func() { r41 <- run(id, 41, start) }()
		go func() { r42 <- run(id, 42, start) }()
		close(start)
		a, b := <-r41, <-r42
		if a.err != nil || b.err != nil {
			t.Fatalf("round %d: 41: %v, 42: %v", id, a.err, b.err)
		}
		if !b.committed {
			t.Fatalf("round %d: 42 did not commit", id)
		}
		switch {
		case a.committed && b.seen != 41:
			t.Errorf("round %d: 41 committed, but 42 saw the account written by %d once admitted: wrong order", id, b.seen)
		case !a.committed:
			stale41++
			if b.seen != 0 {
				t.Errorf("round %d: 41 was refused, but 42 saw the account written by %d", id, b.seen)
			}
		}
		if _, by := account(t, db, id); by != 42 {
			t.Errorf("round %d: account written by %d, want 42", id, by)
		}
	}
	t.Logf("41 was refused in %d of %d rounds and committed first in the others", stale41, rounds)
}
