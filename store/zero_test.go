package store

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/fencekit/fencekit/fencing"
)

// zeroCall is one method called on the zero value of an exported type, or on a nil
// pointer to it, with valid arguments otherwise.
type zeroCall struct {
	// name is "T.Method" for the zero value, "(*T)(nil).Method" for a nil pointer.
	name string
	call func(t *testing.T) error
	// want is nil when the call must work, else the error it must match.
	want error
}

// zeroCalls returns a row for every exported method of every exported type; the
// arguments the calls get are valid, and the DBs fail t if a statement reaches them.
func zeroCalls(ctx context.Context) []zeroCall {
	tokenFn := func() error { return nil }
	txFn := func(*sql.Tx) error { return errors.New("fn called") }
	pgxFn := func(pgx.Tx) error { return errors.New("fn called") }
	var (
		fences *Fences
		table  *Table
		memory *Memory
		rdb    *Redis
		stale  *StaleTokenError
	)
	is := func(err error) error {
		if !errors.Is(err, ErrStaleToken) {
			return errors.New("Is(ErrStaleToken) is false")
		}
		return nil
	}
	text := func(s string) error {
		if !strings.HasPrefix(s, "store: stale fencing token") {
			return errors.New("Error() = " + s)
		}
		return nil
	}
	return []zeroCall{
		{"Fences.CreateTable", func(t *testing.T) error { var f Fences; return f.CreateTable(ctx, untouchedDB{t}) }, ErrInvalid},
		{"Fences.Check", func(t *testing.T) error { var f Fences; return f.Check(ctx, untouchedDB{t}, "r", 1) }, ErrInvalid},
		{"Fences.Mark", func(t *testing.T) error { var f Fences; _, err := f.Mark(ctx, untouchedDB{t}, "r"); return err }, ErrInvalid},
		{"Fences.Tx", func(t *testing.T) error { var f Fences; return f.Tx(ctx, untouchedSQL(t), "r", 1, txFn) }, ErrInvalid},
		{"Fences.PgxTx", func(t *testing.T) error { var f Fences; return f.PgxTx(ctx, untouchedBeginner{t}, "r", 1, pgxFn) }, ErrInvalid},
		{"(*Fences)(nil).CreateTable", func(t *testing.T) error { return fences.CreateTable(ctx, untouchedDB{t}) }, ErrInvalid},
		{"(*Fences)(nil).Check", func(t *testing.T) error { return fences.Check(ctx, untouchedDB{t}, "r", 1) }, ErrInvalid},
		{"(*Fences)(nil).Mark", func(t *testing.T) error { _, err := fences.Mark(ctx, untouchedDB{t}, "r"); return err }, ErrInvalid},
		{"(*Fences)(nil).Tx", func(t *testing.T) error { return fences.Tx(ctx, untouchedSQL(t), "r", 1, txFn) }, ErrInvalid},
		{"(*Fences)(nil).PgxTx", func(t *testing.T) error { return fences.PgxTx(ctx, untouchedBeginner{t}, "r", 1, pgxFn) }, ErrInvalid},

		{"Table.Update", func(t *testing.T) error { var tb Table; return tb.Update(ctx, untouchedDB{t}, 1, 1, "val = $1", "x") }, ErrInvalid},
		{"Table.Upsert", func(t *testing.T) error {
			var tb Table
			return tb.Upsert(ctx, untouchedDB{t}, 1, 1, []string{"val"}, "x")
		}, ErrInvalid},
		{"Table.Mark", func(t *testing.T) error { var tb Table; _, err := tb.Mark(ctx, untouchedDB{t}, 1); return err }, ErrInvalid},
		{"(*Table)(nil).Update", func(t *testing.T) error { return table.Update(ctx, untouchedDB{t}, 1, 1, "val = $1", "x") }, ErrInvalid},
		{"(*Table)(nil).Upsert", func(t *testing.T) error { return table.Upsert(ctx, untouchedDB{t}, 1, 1, []string{"val"}, "x") }, ErrInvalid},
		{"(*Table)(nil).Mark", func(t *testing.T) error { _, err := table.Mark(ctx, untouchedDB{t}, 1); return err }, ErrInvalid},

		{"Memory.Write", func(*testing.T) error { var m Memory; return m.Write("r", 1, tokenFn) }, nil},
		{"Memory.Admit", func(*testing.T) error { var m Memory; return m.Admit("r", 1) }, nil},
		{"Memory.Mark", func(*testing.T) error {
			var m Memory
			if got := m.Mark("r"); got != 0 {
				return errors.New("Mark of an empty Memory is not 0")
			}
			return nil
		}, nil},
		{"(*Memory)(nil).Write", func(*testing.T) error { return memory.Write("r", 1, tokenFn) }, ErrInvalid},
		{"(*Memory)(nil).Admit", func(*testing.T) error { return memory.Admit("r", 1) }, ErrInvalid},
		{"(*Memory)(nil).Mark", func(*testing.T) error {
			if got := memory.Mark("r"); got != 0 {
				return errors.New("Mark of a nil *Memory is not 0")
			}
			return nil
		}, nil},

		{"Redis.Write", func(*testing.T) error { var r Redis; return r.Write(ctx, "k", 1, "v") }, ErrInvalid},
		{"Redis.Read", func(*testing.T) error { var r Redis; _, _, err := r.Read(ctx, "k"); return err }, ErrInvalid},
		{"(*Redis)(nil).Write", func(*testing.T) error { return rdb.Write(ctx, "k", 1, "v") }, ErrInvalid},
		{"(*Redis)(nil).Read", func(*testing.T) error { _, _, err := rdb.Read(ctx, "k"); return err }, ErrInvalid},

		{"StaleTokenError.Error", func(*testing.T) error { var e StaleTokenError; return text(e.Error()) }, nil},
		{"StaleTokenError.Is", func(*testing.T) error { var e StaleTokenError; return is(&e) }, nil},
		{"(*StaleTokenError)(nil).Error", func(*testing.T) error { return text(stale.Error()) }, nil},
		{"(*StaleTokenError)(nil).Is", func(*testing.T) error {
			if !stale.Is(ErrStaleToken) {
				return errors.New("Is(ErrStaleToken) is false")
			}
			return nil
		}, nil},

		// The interfaces: nil values, and what Pgx makes of one.
		{"Option(nil) in NewTable", func(*testing.T) error { _, err := NewTable("t", Option(nil)); return err }, nil},
		{"Pgx(nil).ExecContext", func(*testing.T) error { _, err := Pgx(nil).ExecContext(ctx, "SELECT 1"); return err }, ErrInvalid},
		{"Pgx(typed nil).ExecContext", func(*testing.T) error {
			_, err := Pgx((*pgx.Conn)(nil)).ExecContext(ctx, "SELECT 1")
			return err
		}, ErrInvalid},
	}
}

// TestZeroValues calls every exported method on the zero value of its type and on a
// nil pointer: each works or returns an error matching ErrInvalid (and fencing.ErrInvalid), runs no statement
// and never panics.
func TestZeroValues(t *testing.T) {
	for _, c := range zeroCalls(t.Context()) {
		t.Run(c.name, func(t *testing.T) {
			defer func() {
				if v := recover(); v != nil {
					t.Errorf("panicked: %v", v)
				}
			}()
			err := c.call(t)
			switch {
			case c.want == nil && err != nil:
				t.Errorf("got %v, want it to work", err)
			case c.want != nil && !errors.Is(err, c.want):
				t.Errorf("got %v, want an error matching %v", err, c.want)
			case c.want == ErrInvalid && !errors.Is(err, fencing.ErrInvalid):
				t.Errorf("got %v, want an error matching fencing.ErrInvalid too", err)
			}
		})
	}
}

// TestZeroValues_cover fails when an exported method of an exported type of the
// package has no row in zeroCalls, for its zero value and for a nil pointer.
func TestZeroValues_cover(t *testing.T) {
	var rows []string
	for _, c := range zeroCalls(t.Context()) {
		rows = append(rows, c.name)
	}
	for _, m := range exportedMethods(t, ".") {
		for _, want := range []string{m.typ + "." + m.name, "(*" + m.typ + ")(nil)." + m.name} {
			if !slices.Contains(rows, want) {
				t.Errorf("no row %q in zeroCalls", want)
			}
		}
	}
}

// method is an exported method of an exported type.
type method struct{ typ, name string }

// exportedMethods returns the exported methods of the exported types declared in the
// non-test Go files of dir.
func exportedMethods(t *testing.T, dir string) []method {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var found []method
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(fset, name, src, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv == nil || !fn.Name.IsExported() {
				continue
			}
			typ := fn.Recv.List[0].Type
			if star, ok := typ.(*ast.StarExpr); ok {
				typ = star.X
			}
			if id, ok := typ.(*ast.Ident); ok && id.IsExported() {
				found = append(found, method{id.Name, fn.Name.Name})
			}
		}
	}
	if len(found) == 0 {
		t.Fatalf("no exported methods found in %s", dir)
	}
	return found
}

// untouchedDB is a DB that fails the test when a statement reaches it.
type untouchedDB struct{ t *testing.T }

func (u untouchedDB) ExecContext(_ context.Context, query string, _ ...any) (sql.Result, error) {
	u.t.Errorf("a statement ran: %s", query)
	return nil, errors.New("untouchedDB")
}

// untouchedSQL returns a *sql.DB that fails the test when it connects.
func untouchedSQL(t *testing.T) *sql.DB {
	db := sql.OpenDB(untouchedConnector{t})
	t.Cleanup(func() { _ = db.Close() })
	return db
}

type untouchedConnector struct{ t *testing.T }

func (c untouchedConnector) Connect(context.Context) (driver.Conn, error) {
	c.t.Error("the *sql.DB connected")
	return nil, errors.New("untouchedConnector")
}

func (c untouchedConnector) Driver() driver.Driver { return untouchedDriver{} }

type untouchedDriver struct{}

func (untouchedDriver) Open(string) (driver.Conn, error) { return nil, errors.New("untouchedDriver") }

// untouchedBeginner is a PgxBeginner that fails the test when a transaction begins.
type untouchedBeginner struct{ t *testing.T }

func (u untouchedBeginner) Begin(context.Context) (pgx.Tx, error) {
	u.t.Error("a pgx transaction began")
	return nil, errors.New("untouchedBeginner")
}
