package store

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
)

// TestTable_errorTextsQuoteResource checks that every error a Table returns names its row
// one way, quoted: update "ns/a1": …, whatever went wrong.
func TestTable_errorTextsQuoteResource(t *testing.T) {
	table := mustTable(t, "ns")
	ctx := t.Context()
	tests := []struct {
		name string
		err  func() error
		want string
	}{
		{"exec error", func() error {
			return table.Update(ctx, failingDB{exec: errRecorded}, "a1", 7, "v = $1", "x")
		}, `store: update "ns/a1": recorded`},
		{"rows affected error", func() error {
			return table.Update(ctx, failingDB{rows: errRecorded}, "a1", 7, "v = $1", "x")
		}, `store: update "ns/a1": rows affected: recorded`},
		{"upsert exec error", func() error {
			return table.Upsert(ctx, failingDB{exec: errRecorded}, "a1", 7, []string{"v"}, "x")
		}, `store: upsert "ns/a1": recorded`},
		{"invalid token", func() error {
			return table.Update(ctx, failingDB{}, "a1", 0, "v = $1", "x")
		}, `store: update "ns/a1": invalid fencing token 0`},
		{"nil id", func() error {
			return table.Update(ctx, failingDB{}, nil, 7, "v = $1", "x")
		}, `store: update "ns": nil id`},
		{"nil DB", func() error {
			return table.Update(ctx, nil, "a1", 7, "v = $1", "x")
		}, `store: update "ns": nil DB`},
		{"upsert count mismatch", func() error {
			return table.Upsert(ctx, failingDB{}, "a1", 7, []string{"v"})
		}, `store: upsert "ns": 1 columns but 0 values`},
		{"stale token", func() error {
			return &StaleTokenError{Resource: table.resource("a1"), Token: 3, Mark: 5}
		}, `fencing token 3 for "ns/a1"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.err()
			if err == nil {
				t.Fatal("got nil error, want one")
			}
			if got := err.Error(); !strings.Contains(got, tt.want) {
				t.Errorf("got %q, want it to contain %q", got, tt.want)
			}
			if got := strings.ReplaceAll(err.Error(), `"ns/a1"`, ""); strings.Contains(got, "ns/a1") {
				t.Errorf("got %q: the resource appears unquoted", err.Error())
			}
		})
	}

	// With a database: a missing row, and a statement the database refuses.
	db := postgres(t)
	name := testTable(t, db, true)
	pg := mustTable(t, name)
	quoted := `"` + name + `/42"`
	if _, err := pg.Mark(ctx, db, int64(42)); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), quoted) {
		t.Errorf("Mark of a missing row: got %v, want ErrNotFound naming %s", err, quoted)
	}
	missing := mustTable(t, name+"_missing")
	err := missing.Update(ctx, db, int64(42), 7, "val = $1", "x")
	if want := `store: update "` + name + `_missing/42": `; err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("Update of a missing table: got %v, want it to start with %q", err, want)
	}
}

// failingDB fails ExecContext with exec or, when exec is nil, returns a result whose
// RowsAffected fails with rows.
type failingDB struct{ exec, rows error }

func (f failingDB) ExecContext(context.Context, string, ...any) (sql.Result, error) {
	if f.exec != nil {
		return nil, f.exec
	}
	return failingResult{f.rows}, nil
}

func (failingDB) QueryRowContext(context.Context, string, ...any) *sql.Row {
	panic("failingDB: QueryRowContext not expected")
}

type failingResult struct{ err error }

func (r failingResult) LastInsertId() (int64, error) { return 0, r.err }
func (r failingResult) RowsAffected() (int64, error) { return 0, r.err }
