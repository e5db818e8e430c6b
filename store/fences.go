package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
)

// maxMySQLResource is the longest resource name, in bytes, that a fence table on
// MySQL or MariaDB holds: its key is a VARBINARY(3072), InnoDB's longest index key.
const maxMySQLResource = 3072

// Fences keeps one fence row per resource in a SQL table: the resource's name
// (resource, the primary key) and the highest token accepted for it (token, a
// BIGINT). [Fences.Check], run as the first statement of a transaction, fences the
// whole transaction, whatever it writes afterwards and with whatever library: the
// row lock it takes orders every later transaction of the same resource after this
// one ends. See docs/store.md for the ordering and what it costs.
//
// Fences works on PostgreSQL, MySQL or MariaDB, and SQLite (3.24 or newer), through
// database/sql (*sql.DB, *sql.Tx, *sql.Conn) or pgx ([Pgx]). It picks its SQL from
// the driver of a *sql.DB or *sql.Conn (the Go package of github.com/jackc/pgx,
// github.com/lib/pq, github.com/go-sql-driver/mysql, or any package with "sqlite" in
// its path) and from Pgx; given a *sql.Tx, it asks the database once (SELECT
// version()) and keeps the answer, so use one Fences per database.
//
// [Fences.Tx] and [Fences.PgxTx] run a whole fenced transaction: begin, Check, the
// caller's function, commit or roll back.
//
// The table name is written into the SQL verbatim: it must be a trusted constant,
// never user input. A Fences is safe for concurrent use by multiple goroutines. Make
// one with [NewFences]: the zero value and a nil *Fences name no table, and every
// method returns an error matching [ErrInvalid] and runs nothing.
type Fences struct {
	table string
	// probed is the dialect learnt from the database for a DB whose type does not
	// tell it; 0 until then.
	probed atomic.Uint32
}

// NewFences returns the fence rows kept in table; see [Fences.CreateTable] for the
// table it expects. It does no I/O and cannot fail: an empty table name is reported
// by every method, as an error matching [ErrInvalid].
func NewFences(table string) *Fences {
	return &Fences{table: table}
}

// CreateTable creates the fence table if it does not exist:
//
//	CREATE TABLE IF NOT EXISTS <table> (resource TEXT PRIMARY KEY, token BIGINT NOT NULL)
//
// on PostgreSQL and SQLite; on MySQL and MariaDB the resource is a VARBINARY(3072),
// compared byte for byte (a case-insensitive collation would make "Order:1" and
// "order:1" one resource). An existing table is left as it is. If db is nil or the
// table name is empty, it returns an error matching [ErrInvalid] and runs nothing;
// database errors are returned wrapped.
func (f *Fences) CreateTable(ctx context.Context, db DB) error {
	if err := f.check("create table", nilDB(db)); err != nil {
		return err
	}
	d, err := f.dialect(ctx, db)
	if err != nil {
		return fmt.Errorf("store: create table %q: %w", f.table, err)
	}
	key := "TEXT"
	if d == dialectMySQL {
		key = fmt.Sprintf("VARBINARY(%d)", maxMySQLResource)
	}
	ddl := "CREATE TABLE IF NOT EXISTS " + f.table + " (resource " + key + " PRIMARY KEY, token BIGINT NOT NULL)"
	if _, err := db.ExecContext(ctx, ddl); err != nil {
		return fmt.Errorf("store: create table %q: %w", f.table, err)
	}
	return nil
}

// Check admits token for resource: it raises the resource's fence row to token when
// token is at least the row's token, creating the row on first use, in one
// statement. Run it as the first statement of a transaction (db is a *sql.Tx, a
// pgx.Tx through [Pgx], or a GORM transaction through gormfence.Check) and every
// later statement of the transaction is fenced: the row stays locked until the
// transaction ends, so a transaction of a newer holder waits in its own Check until
// this one commits or rolls back, and a transaction of an older holder that comes
// after a newer one has committed is refused.
//
// If the row's token is above token, Check writes nothing and returns a
// [*StaleTokenError] (matching [ErrStaleToken]) naming "<table>/<resource>"; roll the
// transaction back ([Fences.Tx] does all this). On PostgreSQL at REPEATABLE READ or
// SERIALIZABLE, a concurrent transaction that changed the fence row and committed
// after this transaction's snapshot was taken gives a serialization failure (SQLSTATE
// 40001) instead, whatever the tokens; retry the transaction (see [Fences.Tx]). If db
// is nil, the table name or resource is empty, token is below 1, or (MySQL) resource
// is longer than 3072 bytes, it returns an error matching [ErrInvalid] and runs
// nothing. Database errors are returned wrapped.
//
// On MySQL and MariaDB, which count changed rows, not matched ones, a check that
// does not raise the row (a repeated check under the same token, or a refused one)
// reads the row back to tell which, with or without clientFoundRows=true in the DSN:
// one round trip more.
func (f *Fences) Check(ctx context.Context, db DB, resource string, token int64) error {
	name, err := f.validate("check", nilDB(db), resource, token)
	if err != nil {
		return err
	}
	d, err := f.dialect(ctx, db)
	if err != nil {
		return fmt.Errorf("store: check %q: %w", name, err)
	}
	if err := checkLength("check", name, d, resource); err != nil {
		return err
	}
	return f.admit(ctx, db, d, name, resource, token)
}

// admit runs Check's statement on db, which talks dialect d, for the valid resource
// and token; name is the fence row's name in errors.
func (f *Fences) admit(ctx context.Context, db DB, d dialect, name, resource string, token int64) error {
	res, err := db.ExecContext(ctx, f.checkSQL(d), resource, token)
	if err != nil {
		return fmt.Errorf("store: check %q: %w", name, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("store: check %q: rows affected: %w", name, err)
	}
	// One row inserted or raised (MySQL: 2 for a raised row). MySQL also counts 1 for
	// an unchanged row under clientFoundRows=true, so it reads the mark unless 2.
	if n == 2 || (n == 1 && d != dialectMySQL) {
		return nil
	}
	mark, err := f.mark(ctx, db, d, resource, d == dialectMySQL)
	switch {
	case err != nil:
		return fmt.Errorf("store: check %q: %w", name, err)
	case mark > token:
		return &StaleTokenError{Resource: name, Token: token, Mark: mark}
	case mark == token && d == dialectMySQL:
		return nil // inserted, or checked again under the same token
	default:
		return fmt.Errorf("store: check %q: %d rows changed, yet the fence row holds %d for token %d", name, n, mark, token)
	}
}

// Mark returns the token of resource's fence row: the highest token admitted for it.
// If the row does not exist (no token was ever admitted), it returns an error
// matching [ErrNotFound]. If db is nil or the table name or resource is empty, it
// returns an error matching [ErrInvalid] and runs nothing. Database errors are
// returned wrapped.
func (f *Fences) Mark(ctx context.Context, db DB, resource string) (int64, error) {
	if err := f.check("mark", nilDB(db)); err != nil {
		return 0, err
	}
	if resource == "" {
		return 0, invalid("store: mark %q: empty resource", f.table)
	}
	d, err := f.dialect(ctx, db)
	if err == nil {
		var mark int64
		if mark, err = f.mark(ctx, db, d, resource, false); err == nil {
			return mark, nil
		}
	}
	return 0, fmt.Errorf("store: mark %q: %w", f.table+"/"+resource, err)
}

// checkSQL is Check's statement. MySQL evaluates GREATEST on the row it locked, so the
// row keeps the higher of the two tokens.
func (f *Fences) checkSQL(d dialect) string {
	switch d {
	case dialectMySQL:
		return "INSERT INTO " + f.table + " (resource, token) VALUES (?, ?)" +
			" ON DUPLICATE KEY UPDATE token = GREATEST(token, VALUES(token))"
	case dialectSQLite:
		return "INSERT INTO " + f.table + " AS cur (resource, token) VALUES (?, ?)" +
			" ON CONFLICT (resource) DO UPDATE SET token = excluded.token WHERE cur.token <= excluded.token"
	}
	return "INSERT INTO " + f.table + " AS cur (resource, token) VALUES ($1, $2)" +
		" ON CONFLICT (resource) DO UPDATE SET token = EXCLUDED.token WHERE cur.token <= EXCLUDED.token"
}

// mark reads resource's token. locking (MySQL) reads the latest row, not the
// transaction's snapshot: Check's statement has locked it already.
func (f *Fences) mark(ctx context.Context, db DB, d dialect, resource string, locking bool) (int64, error) {
	query := "SELECT token FROM " + f.table + " WHERE resource = $1"
	if d != dialectPostgres {
		query = "SELECT token FROM " + f.table + " WHERE resource = ?"
	}
	if locking {
		query += " FOR UPDATE"
	}
	var mark int64
	err := scanRow(ctx, db, query, []any{resource}, &mark)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, notFoundError("no fence row")
	}
	return mark, err
}

// dialect returns the kind of database db talks to: from its type when that tells,
// else as learnt from the database once.
func (f *Fences) dialect(ctx context.Context, db DB) (dialect, error) {
	if d := dialectOf(db); d != dialectUnknown {
		return d, nil
	}
	if d := dialect(f.probed.Load()); d != dialectUnknown {
		return d, nil
	}
	d, err := probeDialect(ctx, db)
	if err != nil {
		return d, err
	}
	f.probed.Store(uint32(d))
	return d, nil
}

// check rejects a nil Fences, an empty table name (the zero Fences) and a nil db
// (noDB).
func (f *Fences) check(op string, noDB bool) error {
	switch {
	case f == nil:
		return invalid("store: %s: nil *Fences", op)
	case strings.TrimSpace(f.table) == "":
		return invalid("store: %s: empty table name", op)
	case noDB:
		return invalid("store: %s %q: nil DB", op, f.table)
	}
	return nil
}

// validate rejects what every call that admits a token rejects before any I/O: what
// check rejects, an empty resource and an invalid token. It returns the fence row's
// name in errors, "<table>/<resource>".
func (f *Fences) validate(op string, noDB bool, resource string, token int64) (string, error) {
	if err := f.check(op, noDB); err != nil {
		return "", err
	}
	if resource == "" {
		return "", invalid("store: %s %q: empty resource", op, f.table)
	}
	name := f.table + "/" + resource
	return name, checkToken(op, name, token)
}

// checkLength rejects, on MySQL, a resource longer than the fence table's key.
func checkLength(op, name string, d dialect, resource string) error {
	if d == dialectMySQL && len(resource) > maxMySQLResource {
		return invalid("store: %s %q: resource longer than %d bytes (MySQL's key)", op, name, maxMySQLResource)
	}
	return nil
}
