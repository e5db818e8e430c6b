package store

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"reflect"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// DB is what a [Table] and [Fences] run their statements on. A [*sql.DB], [*sql.Tx]
// or [*sql.Conn] is one as it is; pass a *sql.Tx to make a fenced statement part of a
// larger transaction. A pgx v5 connection (pgx.Tx, *pgx.Conn, *pgxpool.Pool) becomes
// one through [Pgx].
//
// Statements run through ExecContext. The reads that say why a statement changed no
// row (the mark of a refused token) go through QueryRowContext, as the database/sql
// types have it, or through the connection wrapped by Pgx; with a DB that has neither,
// those reads fail with an error that says so.
type DB interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// rowQuerier is the read method of *sql.DB, *sql.Tx and *sql.Conn.
type rowQuerier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// PgxDB is the part of pgx v5's pgx.Tx, *pgx.Conn and *pgxpool.Pool (and
// *pgxpool.Conn) that [Pgx] uses.
type PgxDB interface {
	Exec(ctx context.Context, sql string, arguments ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Pgx returns db as a [DB], so that a [Table] or [Fences] runs its statements on a
// pgx v5 connection without database/sql: a pgx.Tx (the fenced statement is part of
// that transaction), a *pgx.Conn or a *pgxpool.Pool. The statements are the
// PostgreSQL ones, with $1, $2, … placeholders; rows affected come from the command
// tag, and pgx.ErrNoRows is reported as a missing row, as with database/sql.
//
// Pgx does no I/O. A nil db gives a DB that every method of Table and Fences refuses,
// and whose ExecContext fails, with an error matching [ErrInvalid].
func Pgx(db PgxDB) DB {
	return pgxDB{db: db}
}

// pgxDB adapts a pgx connection to DB.
type pgxDB struct{ db PgxDB }

func (p pgxDB) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if isNil(p.db) {
		return nil, invalid("store: pgx: nil connection")
	}
	tag, err := p.db.Exec(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return pgxResult(tag.RowsAffected()), nil
}

// scanRow runs a query that returns at most one row and scans it into dest; no row
// is sql.ErrNoRows.
func (p pgxDB) scanRow(ctx context.Context, query string, args []any, dest ...any) error {
	if isNil(p.db) {
		return invalid("store: pgx: nil connection")
	}
	err := p.db.QueryRow(ctx, query, args...).Scan(dest...)
	if errors.Is(err, pgx.ErrNoRows) {
		return sql.ErrNoRows
	}
	return err
}

// pgxResult is the sql.Result of a pgx command tag.
type pgxResult int64

func (pgxResult) LastInsertId() (int64, error) {
	return 0, errors.New("store: pgx: LastInsertId is not supported")
}

func (r pgxResult) RowsAffected() (int64, error) { return int64(r), nil }

// scanRow runs a query that returns at most one row on db and scans it into dest.
// No row is sql.ErrNoRows.
func scanRow(ctx context.Context, db DB, query string, args []any, dest ...any) error {
	switch q := db.(type) {
	case pgxDB:
		return q.scanRow(ctx, query, args, dest...)
	case rowQuerier:
		return q.QueryRowContext(ctx, query, args...).Scan(dest...)
	}
	return fmt.Errorf("%T cannot read a row: it has no QueryRowContext method", db)
}

// nilDB reports whether db is nil, holds a nil pointer, or is Pgx(nil).
func nilDB(db DB) bool {
	if p, ok := db.(pgxDB); ok {
		return isNil(p.db)
	}
	return isNil(db)
}

// dialect is the SQL a Fences writes for a kind of database.
type dialect uint8

const (
	dialectUnknown dialect = iota
	dialectPostgres
	dialectMySQL
	dialectSQLite
)

func (d dialect) String() string {
	switch d {
	case dialectPostgres:
		return "PostgreSQL"
	case dialectMySQL:
		return "MySQL"
	case dialectSQLite:
		return "SQLite"
	}
	return "unknown"
}

// driverOwner is a DB that names its driver, as *sql.DB does.
type driverOwner interface {
	Driver() driver.Driver
}

// dialectOf tells the kind of database db talks to without a round trip: Pgx is
// PostgreSQL; *sql.DB (or any DB with a Driver method) and *sql.Conn by the Go
// package of their driver. It returns dialectUnknown for a *sql.Tx and anything else.
func dialectOf(db DB) dialect {
	switch d := db.(type) {
	case pgxDB:
		return dialectPostgres
	case driverOwner:
		return driverDialect(d.Driver())
	case *sql.Conn:
		found := dialectUnknown
		_ = d.Raw(func(conn any) error {
			found = driverDialect(conn)
			return nil
		})
		return found
	}
	return dialectUnknown
}

// driverDialect tells the kind of database from the Go package that defines v's type:
// github.com/jackc/pgx/v5/stdlib and github.com/lib/pq are PostgreSQL,
// github.com/go-sql-driver/mysql is MySQL, and any package with "sqlite" in its path
// (modernc.org/sqlite, github.com/glebarez/go-sqlite, github.com/mattn/go-sqlite3, …)
// is SQLite.
func driverDialect(v any) dialect {
	if v == nil {
		return dialectUnknown
	}
	t := reflect.TypeOf(v)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	pkg := t.PkgPath()
	switch {
	case strings.Contains(pkg, "sqlite"):
		return dialectSQLite
	case strings.Contains(pkg, "mysql"):
		return dialectMySQL
	case strings.Contains(pkg, "jackc/pgx"), strings.Contains(pkg, "lib/pq"):
		return dialectPostgres
	}
	return dialectUnknown
}

// probeDialect asks the database what it is, for a DB whose type does not say (a
// *sql.Tx): PostgreSQL and MySQL answer SELECT version() (the statement succeeds on
// both, so it does not abort a PostgreSQL transaction); SQLite has no version() and
// answers SELECT sqlite_version() instead.
func probeDialect(ctx context.Context, db DB) (dialect, error) {
	var version string
	err := scanRow(ctx, db, "SELECT version()", nil, &version)
	if err == nil {
		v := strings.ToLower(version)
		switch {
		case strings.Contains(v, "mariadb"), v != "" && v[0] >= '0' && v[0] <= '9':
			return dialectMySQL, nil
		case strings.Contains(v, "postgres"), strings.Contains(v, "cockroach"):
			return dialectPostgres, nil
		}
		return dialectUnknown, fmt.Errorf("unknown database: version() is %q", version)
	}
	if serr := scanRow(ctx, db, "SELECT sqlite_version()", nil, &version); serr == nil {
		return dialectSQLite, nil
	}
	return dialectUnknown, fmt.Errorf("cannot tell the kind of database: SELECT version(): %w", err)
}
