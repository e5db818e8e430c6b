package errorstest

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
)

// sqlDB returns a database for the store cases, with a table of fence rows (resource
// TEXT, token BIGINT) for a store.Fences and a table of rows (id TEXT, fence_token BIGINT)
// for a store.Table, and their names: on the PostgreSQL named by FENCING_DATABASE_URL when it
// is set, tables of their own dropped when t ends; otherwise a database/sql driver of this
// package that answers the statements of package store as PostgreSQL would, from memory (pg,
// below).
func sqlDB(t *testing.T) (db *sql.DB, fences, rows string) {
	t.Helper()
	dsn := os.Getenv("FENCING_DATABASE_URL")
	if dsn == "" {
		db = sql.OpenDB(&pg{rows: map[string]int64{}})
		t.Cleanup(func() { _ = db.Close() })
		return db, "fences", "accounts"
	}
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	fences = fmt.Sprintf("fk_errorstest_%d_%x", os.Getpid(), rand.Uint64())
	rows = fences + "_rows"
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for _, ddl := range []string{
		"CREATE TABLE " + fences + " (resource TEXT PRIMARY KEY, token BIGINT NOT NULL)",
		"CREATE TABLE " + rows + " (id TEXT PRIMARY KEY, fence_token BIGINT NOT NULL)",
	} {
		if _, err := db.ExecContext(ctx, ddl); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { _, _ = db.ExecContext(context.Background(), "DROP TABLE "+fences+", "+rows) })
	return db, fences, rows
}

// insertRow inserts the row id of the table rows with its mark.
func insertRow(t *testing.T, db *sql.DB, rows, id string, mark int64) {
	t.Helper()
	if _, err := db.ExecContext(t.Context(), "INSERT INTO "+rows+" (id, fence_token) VALUES ($1, $2)", id, mark); err != nil {
		t.Fatal(err)
	}
}

// pg is a database/sql driver, and its only database, that runs the statements package store
// sends to PostgreSQL on one table held in memory: one mark per row, by name (a fence row's
// resource, a store.Table row's id).
type pg struct {
	mu   sync.Mutex
	rows map[string]int64
}

func (d *pg) Connect(context.Context) (driver.Conn, error) { return (*pgConn)(d), nil }
func (d *pg) Driver() driver.Driver                        { return d }
func (d *pg) Open(string) (driver.Conn, error)             { return (*pgConn)(d), nil }

type pgConn pg

func (c *pgConn) Prepare(string) (driver.Stmt, error) {
	return nil, errors.New("pg: no prepared statements")
}
func (c *pgConn) Close() error              { return nil }
func (c *pgConn) Begin() (driver.Tx, error) { return c, nil }
func (c *pgConn) Commit() error             { return nil }
func (c *pgConn) Rollback() error           { return nil }

// ExecContext runs a fence row's check (INSERT ... ON CONFLICT ... WHERE cur.token <=
// EXCLUDED.token: args resource, token) and a Table's update (UPDATE ... WHERE id = $n+2 AND
// fence_token <= $n+3: args ..., token, id, token).
func (c *pgConn) ExecContext(_ context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case strings.HasPrefix(query, "INSERT INTO ") && len(args) == 2:
		name, token := fmt.Sprint(args[0].Value), args[1].Value.(int64)
		if mark, ok := c.rows[name]; ok && mark > token {
			return driver.RowsAffected(0), nil
		}
		c.rows[name] = token
		return driver.RowsAffected(1), nil
	case strings.HasPrefix(query, "UPDATE ") && len(args) >= 3:
		n := len(args)
		token, name := args[n-3].Value.(int64), fmt.Sprint(args[n-2].Value)
		if mark, ok := c.rows[name]; !ok || mark > token {
			return driver.RowsAffected(0), nil
		}
		c.rows[name] = token
		return driver.RowsAffected(1), nil
	}
	return nil, fmt.Errorf("pg: statement not understood: %s", query)
}

// QueryContext answers SELECT version() and the read of one row's mark (args: its name).
func (c *pgConn) QueryContext(_ context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case query == "SELECT version()":
		return &pgRows{col: "version", values: []driver.Value{"PostgreSQL 17.0 (errorstest)"}}, nil
	case strings.HasPrefix(query, "SELECT ") && len(args) == 1:
		r := &pgRows{col: "token"}
		if mark, ok := c.rows[fmt.Sprint(args[0].Value)]; ok {
			r.values = []driver.Value{mark}
		}
		return r, nil
	}
	return nil, fmt.Errorf("pg: query not understood: %s", query)
}

// pgRows is a result of one column and at most one row.
type pgRows struct {
	col    string
	values []driver.Value
}

func (r *pgRows) Columns() []string { return []string{r.col} }
func (r *pgRows) Close() error      { return nil }
func (r *pgRows) Next(dest []driver.Value) error {
	if len(r.values) == 0 {
		return io.EOF
	}
	dest[0], r.values = r.values[0], r.values[1:]
	return nil
}
