package store

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// PgxBeginner is what [Fences.PgxTx] begins its transaction on: pgx v5's
// *pgxpool.Pool, *pgxpool.Conn and *pgx.Conn, and pgx.Tx, whose Begin starts a
// nested transaction (a savepoint).
type PgxBeginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Tx runs fn in a transaction of db fenced for resource: it begins the transaction,
// runs [Fences.Check] with token as its first statement, then fn, and commits when
// both succeed. Otherwise it rolls the transaction back, and nothing that Check or fn
// wrote is kept:
//
//   - a stale token: Tx returns the [*StaleTokenError] (matching [ErrStaleToken]) and
//     does not call fn;
//   - fn returns an error: Tx returns that error as it is, not wrapped;
//   - fn panics (or calls runtime.Goexit): Tx rolls back, and the panic goes on with
//     its value;
//   - begin, Check or commit fails: Tx returns the database's error wrapped (Check's
//     as [Fences.Check] returns them). After a commit error, the transaction may have
//     committed if the connection failed during the commit.
//
// fn runs statements on tx and must not commit or roll it back. If f is nil or the
// zero Fences, db or fn is nil, resource is empty, token is below 1 or (MySQL)
// resource is longer than 3072 bytes, Tx returns an error matching [ErrInvalid] and
// runs nothing. If ctx is done before the transaction begins, it returns an error
// matching ctx.Err() and runs nothing.
//
// The transaction has db's default isolation level; to choose another, set the
// session's default (PostgreSQL: default_transaction_isolation, e.g. in the
// connection string; MySQL: transaction_isolation; MariaDB: tx_isolation). What a
// Check that waits on the fence row for a concurrent transaction of the resource
// does when that one ends:
//
//   - PostgreSQL at READ COMMITTED (its default): it admits token if token is still at
//     least the row's token, else returns a *StaleTokenError. No retry is needed.
//   - MySQL and MariaDB, also at REPEATABLE READ (InnoDB's default): the same. Check's
//     statement reads the latest row, not a snapshot, and fn's reads, which come after
//     it, see what the other transaction committed.
//   - PostgreSQL at REPEATABLE READ or SERIALIZABLE: if the other transaction changed
//     the row and committed, Check fails with a serialization failure, whatever the
//     tokens: Tx returns an error holding a *pgconn.PgError with Code "40001" (SQLSTATE
//     serialization_failure), having called no fn and written nothing. Retry the
//     whole Tx, with the token read again from the lock (a lock still held keeps its
//     token): the new transaction sees the committed row, and is admitted or refused as
//     at READ COMMITTED. If the other transaction rolled back, Check goes on as at
//     READ COMMITTED.
//
// At SERIALIZABLE, fn's statements and the commit can also fail with 40001 when fn's
// reads and writes conflict with transactions fenced on other resources (or not
// fenced); retry those the same way.
func (f *Fences) Tx(ctx context.Context, db *sql.DB, resource string, token int64, fn func(*sql.Tx) error) error {
	name, err := f.validate("tx", isNil(db), resource, token)
	if err != nil {
		return err
	}
	if fn == nil {
		return invalid("store: tx %q: nil func", name)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("store: tx %q: %w", name, err)
	}
	d, err := f.dialect(ctx, db)
	if err != nil {
		return fmt.Errorf("store: tx %q: %w", name, err)
	}
	if err := checkLength("tx", name, d, resource); err != nil {
		return err
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("store: tx %q: begin: %w", name, err)
	}
	// Rolls back on every way out but a commit, panics included; after a commit, or
	// once database/sql has rolled back for a done ctx, it does nothing.
	defer func() { _ = tx.Rollback() }()
	if err := f.admit(ctx, tx, d, name, resource, token); err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("store: tx %q: commit: %w", name, err)
	}
	return nil
}

// PgxTx is [Fences.Tx] on pgx v5: it begins a transaction on db (a *pgxpool.Pool, a
// *pgx.Conn, or a pgx.Tx, in which it is a savepoint), runs [Fences.Check] first,
// then fn, and commits when both succeed, rolling back otherwise; its errors, its
// handling of a panic in fn and its behaviour at each isolation level are those of
// Tx, on PostgreSQL. It rolls back with ctx, as pgx's own BeginFunc does: if ctx is
// done by then, pgx closes the connection, which ends the transaction on the server.
//
// In a pgx.Tx, committing releases the savepoint: the fence row stays locked, and
// what Check and fn wrote is kept, until the outer transaction, which the caller
// commits or rolls back, ends; what the outer transaction ran before PgxTx is not
// fenced. A stale token, an error of fn or a serialization failure rolls back to the
// savepoint and leaves the outer transaction usable; at REPEATABLE READ or
// SERIALIZABLE, retry the outer transaction, not PgxTx inside it: the savepoint has
// the outer transaction's snapshot and fails again.
func (f *Fences) PgxTx(ctx context.Context, db PgxBeginner, resource string, token int64, fn func(pgx.Tx) error) error {
	name, err := f.validate("pgx tx", isNil(db), resource, token)
	if err != nil {
		return err
	}
	if fn == nil {
		return invalid("store: pgx tx %q: nil func", name)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("store: pgx tx %q: %w", name, err)
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		return fmt.Errorf("store: pgx tx %q: begin: %w", name, err)
	}
	// A no-op (pgx.ErrTxClosed) after a commit.
	defer func() { _ = tx.Rollback(ctx) }()
	if err := f.admit(ctx, Pgx(tx), dialectPostgres, name, resource, token); err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("store: pgx tx %q: commit: %w", name, err)
	}
	return nil
}
