package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Table is a fencing check in a SQL database: it writes conditional statements for a
// table whose rows carry their high-water mark in a BIGINT column, by default
// fence_token. Add the column to an existing table with
//
//	ALTER TABLE accounts ADD COLUMN fence_token BIGINT NOT NULL DEFAULT 0;
//
// Existing rows start at mark 0, which every valid token (1 or more) passes.
//
// The table and column names are written into the SQL verbatim: they must be trusted
// constants, quoted as the database requires, never user input. Statements use
// PostgreSQL placeholders ($1, $2, …) unless [WithQuestionMarks] is given. Its
// methods take a [DB]: a *sql.DB, *sql.Tx or *sql.Conn, or a pgx connection wrapped by
// [Pgx].
//
// A Table is immutable and safe for concurrent use by multiple goroutines. Make one
// with [NewTable]: the zero value and a nil *Table name no table, and their methods
// return an error matching [ErrInvalid] and run nothing.
type Table struct {
	name        string
	idColumn    string
	tokenColumn string
	question    bool
}

// Option configures a [Table].
type Option interface {
	apply(*tableConfig)
}

type tableConfig struct {
	idColumn    string
	tokenColumn string
	question    bool
}

type optionFunc func(*tableConfig)

func (f optionFunc) apply(c *tableConfig) { f(c) }

// WithIDColumn names the column that identifies a row; it must be unique (the primary
// key) for [Table.Upsert]. Default: "id".
func WithIDColumn(name string) Option {
	return optionFunc(func(c *tableConfig) { c.idColumn = name })
}

// WithTokenColumn names the BIGINT column that holds each row's high-water mark.
// Default: "fence_token".
func WithTokenColumn(name string) Option {
	return optionFunc(func(c *tableConfig) { c.tokenColumn = name })
}

// WithQuestionMarks makes the Table write "?" placeholders, as MySQL expects, instead
// of PostgreSQL's $1, $2, …. With MySQL, add clientFoundRows=true to the DSN (in
// github.com/go-sql-driver/mysql): by default MySQL counts only rows whose values
// changed, so a repeated write of the same data under the same token would look like
// a refused one. [Table.Upsert] is PostgreSQL-only and returns an error under this
// option. Default: PostgreSQL placeholders.
func WithQuestionMarks() Option {
	return optionFunc(func(c *tableConfig) { c.question = true })
}

// NewTable returns a check for the SQL table name. It returns an error matching
// [ErrInvalid] if name or a column name is empty.
func NewTable(name string, opts ...Option) (*Table, error) {
	c := tableConfig{idColumn: "id", tokenColumn: "fence_token"}
	for _, o := range opts {
		if o != nil {
			o.apply(&c)
		}
	}
	switch {
	case strings.TrimSpace(name) == "":
		return nil, invalid("store: new table: empty table name")
	case strings.TrimSpace(c.idColumn) == "":
		return nil, invalid("store: new table %q: empty id column", name)
	case strings.TrimSpace(c.tokenColumn) == "":
		return nil, invalid("store: new table %q: empty token column", name)
	}
	return &Table{name: name, idColumn: c.idColumn, tokenColumn: c.tokenColumn, question: c.question}, nil
}

// Update runs the fenced update of the row id: it applies set, a SQL SET list such as
// "balance = $1, note = $2" whose placeholders refer to args, and records token as the
// row's mark, but only if token is at least the mark. The statement is
//
//	UPDATE <table> SET <set>, fence_token = $n+1 WHERE id = $n+2 AND fence_token <= $n+3
//
// with n = len(args); with [WithQuestionMarks], set uses "?" and the helper's
// placeholders follow. An empty set only raises the mark.
//
// If the update changes no row, Update reads the row's mark to say why: a
// [*StaleTokenError] (matching [ErrStaleToken]) when the mark is above token, or an
// error matching [ErrNotFound] when the row does not exist. In both cases nothing was
// written. If the row exists and its mark admits token, yet no row changed (the row
// was inserted after the update ran, or MySQL lacks clientFoundRows=true), it
// returns an error matching neither. If db is nil, id is nil or token is below 1, it
// returns an error matching [ErrInvalid] and runs nothing. Database errors are
// returned wrapped.
//
// Inside a transaction (db is a *sql.Tx, or a pgx.Tx through [Pgx]), the row stays locked until commit, so
// fenced writers to one row are serialised. At READ COMMITTED (PostgreSQL's
// default) a newer token committed meanwhile yields ErrStaleToken; at REPEATABLE
// READ or SERIALIZABLE PostgreSQL reports a serialization failure instead, and
// the retried transaction gets ErrStaleToken.
func (t *Table) Update(ctx context.Context, db DB, id any, token int64, set string, args ...any) error {
	if err := t.check("update", db, id, token, true); err != nil {
		return err
	}
	p := t.placeholders(len(args), 3)
	assign := t.tokenColumn + " = " + p[0]
	if strings.TrimSpace(set) != "" {
		assign = set + ", " + assign
	}
	query := "UPDATE " + t.name + " SET " + assign +
		" WHERE " + t.idColumn + " = " + p[1] + " AND " + t.tokenColumn + " <= " + p[2]
	all := make([]any, 0, len(args)+3)
	all = append(append(all, args...), token, id, token)
	return t.exec(ctx, db, "update", id, token, query, all)
}

// Upsert inserts the row id with token as its mark and the given column values, or,
// if the row exists, overwrites those columns and the mark only if token is at least
// the mark (PostgreSQL only). columns and values pair up one to one; the id column
// must be unique. The statement is
//
//	INSERT INTO <table> AS cur (id, fence_token, <columns>) VALUES ($1, $2, …)
//	ON CONFLICT (id) DO UPDATE SET <column> = EXCLUDED.<column>, …,
//	    fence_token = EXCLUDED.fence_token
//	WHERE cur.fence_token <= EXCLUDED.fence_token
//
// If the existing row's mark is above token, Upsert writes nothing and returns a
// [*StaleTokenError] (matching [ErrStaleToken]). If db is nil, id is nil, token is
// below 1, a column name is empty, the counts differ or the Table uses
// [WithQuestionMarks], it returns an error matching [ErrInvalid] and runs nothing.
// Database errors are returned wrapped.
func (t *Table) Upsert(ctx context.Context, db DB, id any, token int64, columns []string, values ...any) error {
	if err := t.check("upsert", db, id, token, true); err != nil {
		return err
	}
	if t.question {
		return invalid("store: upsert %q: Upsert is PostgreSQL-only (the Table uses question marks)", t.name)
	}
	if len(columns) != len(values) {
		return invalid("store: upsert %q: %d columns but %d values", t.name, len(columns), len(values))
	}
	p := t.placeholders(0, len(columns)+2)
	var b strings.Builder
	b.WriteString("INSERT INTO " + t.name + " AS cur (" + t.idColumn + ", " + t.tokenColumn)
	for _, c := range columns {
		if strings.TrimSpace(c) == "" {
			return invalid("store: upsert %q: empty column name", t.name)
		}
		b.WriteString(", " + c)
	}
	b.WriteString(") VALUES (" + strings.Join(p, ", ") + ")")
	b.WriteString(" ON CONFLICT (" + t.idColumn + ") DO UPDATE SET ")
	for _, c := range columns {
		b.WriteString(c + " = EXCLUDED." + c + ", ")
	}
	b.WriteString(t.tokenColumn + " = EXCLUDED." + t.tokenColumn)
	b.WriteString(" WHERE cur." + t.tokenColumn + " <= EXCLUDED." + t.tokenColumn)
	all := make([]any, 0, len(values)+2)
	all = append(append(all, id, token), values...)
	return t.exec(ctx, db, "upsert", id, token, b.String(), all)
}

// Mark returns the high-water mark of the row id. If the row does not exist, it
// returns an error matching [ErrNotFound]. If db or id is nil, it returns an error
// matching [ErrInvalid] and runs nothing. Database errors are returned wrapped.
func (t *Table) Mark(ctx context.Context, db DB, id any) (int64, error) {
	if err := t.check("mark", db, id, 0, false); err != nil {
		return 0, err
	}
	query := "SELECT " + t.tokenColumn + " FROM " + t.name + " WHERE " + t.idColumn + " = " + t.placeholders(0, 1)[0]
	var mark int64
	err := scanRow(ctx, db, query, []any{id}, &mark)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, fmt.Errorf("%w: %q", ErrNotFound, t.resource(id))
	}
	if err != nil {
		return 0, fmt.Errorf("store: mark %q: %w", t.resource(id), err)
	}
	return mark, nil
}

// exec runs a conditional statement and, when it changes no row, finds out why.
func (t *Table) exec(ctx context.Context, db DB, op string, id any, token int64, query string, args []any) error {
	res, err := db.ExecContext(ctx, query, args...)
	if err != nil {
		return fmt.Errorf("store: %s %q: %w", op, t.resource(id), err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("store: %s %q: rows affected: %w", op, t.resource(id), err)
	}
	if n > 0 {
		return nil
	}
	mark, err := t.Mark(ctx, db, id)
	switch {
	case err != nil:
		return err
	case mark > token:
		return &StaleTokenError{Resource: t.resource(id), Token: token, Mark: mark}
	default:
		return fmt.Errorf("store: %s %q: no row changed, yet mark %d admits token %d: "+
			"the row appeared concurrently, or (MySQL) the DSN lacks clientFoundRows=true",
			op, t.resource(id), mark, token)
	}
}

// check rejects a nil or zero Table, a nil db, a nil id and, if hasToken, an invalid
// token.
func (t *Table) check(op string, db DB, id any, token int64, hasToken bool) error {
	switch {
	case t == nil:
		return invalid("store: %s: nil *Table", op)
	case strings.TrimSpace(t.name) == "", strings.TrimSpace(t.idColumn) == "", strings.TrimSpace(t.tokenColumn) == "":
		return invalid("store: %s: zero Table: make one with NewTable", op)
	case nilDB(db):
		return invalid("store: %s %q: nil DB", op, t.name)
	case id == nil:
		return invalid("store: %s %q: nil id", op, t.name)
	}
	if !hasToken {
		return nil
	}
	return checkToken(op, t.resource(id), token)
}

// placeholders returns count placeholders for the arguments after the first skip.
func (t *Table) placeholders(skip, count int) []string {
	p := make([]string, count)
	for i := range p {
		if t.question {
			p[i] = "?"
		} else {
			p[i] = "$" + strconv.Itoa(skip+i+1)
		}
	}
	return p
}

// resource names a row in errors, which quote it with %q like every name they hold:
// "table/id".
func (t *Table) resource(id any) string {
	return fmt.Sprintf("%s/%v", t.name, id)
}
