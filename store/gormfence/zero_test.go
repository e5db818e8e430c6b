package gormfence_test

import (
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/store"
	"github.com/fencekit/fencekit/store/gormfence"
	"gorm.io/gorm"
)

// zeroCall is one method called on the zero value of an exported type, or on a nil
// pointer to it, or a function given a zero or nil argument.
type zeroCall struct {
	// name is "T.Method" for the zero value, "(*T)(nil).Method" for a nil pointer.
	name string
	call func(t *testing.T) error
	// want is nil when the call must work, else the error it must match.
	want error
}

// zeroCalls returns a row for every exported method of every exported type, and for
// the package's functions given zero arguments.
func zeroCalls() []zeroCall {
	var nilPlugin *gormfence.Plugin
	// registered reports an error if a callback of the plugin is on db.
	registered := func(db *gorm.DB) error {
		if db.Callback().Create().Get("gormfence:before_create") != nil {
			return errors.New("the plugin's callbacks are registered")
		}
		return nil
	}
	// inTx runs check in a transaction of a SQLite database, under token 1.
	inTx := func(t *testing.T, check func(tx *gorm.DB) error) error {
		db := openSQLite(t, prefix())
		return db.WithContext(fencing.ContextWithToken(t.Context(), 1)).Transaction(check)
	}
	return []zeroCall{
		{"Plugin.Name", func(*testing.T) error {
			var p gormfence.Plugin
			if p.Name() != "gormfence" {
				return errors.New("Name() = " + p.Name())
			}
			return nil
		}, nil},
		{"Plugin.Initialize", func(t *testing.T) error {
			var p gormfence.Plugin
			db := openSQLite(t, prefix())
			err := p.Initialize(db)
			return errors.Join(err, registered(db))
		}, store.ErrInvalid},
		{"(*Plugin)(nil).Name", func(*testing.T) error {
			if nilPlugin.Name() != "gormfence" {
				return errors.New("Name() = " + nilPlugin.Name())
			}
			return nil
		}, nil},
		{"(*Plugin)(nil).Initialize", func(t *testing.T) error {
			db := openSQLite(t, prefix())
			return errors.Join(nilPlugin.Initialize(db), registered(db))
		}, store.ErrInvalid},
		{"db.Use(&Plugin{})", func(t *testing.T) error { return openSQLite(t, prefix()).Use(&gormfence.Plugin{}) }, store.ErrInvalid},
		{"Initialize(nil *gorm.DB)", func(*testing.T) error { return gormfence.New().Initialize(nil) }, store.ErrInvalid},
		{"Initialize(&gorm.DB{})", func(*testing.T) error { return gormfence.New().Initialize(&gorm.DB{}) }, store.ErrInvalid},
		{"Initialize(&gorm.DB{Config: &gorm.Config{}})", func(*testing.T) error {
			return gormfence.New().Initialize(&gorm.DB{Config: &gorm.Config{}})
		}, store.ErrInvalid},
		{"New(nil Option)", func(t *testing.T) error { return openSQLite(t, prefix()).Use(gormfence.New(nil)) }, nil},
		{"Check(nil *gorm.DB)", func(*testing.T) error { return gormfence.Check(nil, store.NewFences("f"), "r") }, store.ErrInvalid},
		{"Check(&gorm.DB{})", func(*testing.T) error { return gormfence.Check(&gorm.DB{}, store.NewFences("f"), "r") }, store.ErrInvalid},
		{"Check(tx, nil *store.Fences)", func(t *testing.T) error {
			return inTx(t, func(tx *gorm.DB) error { return gormfence.Check(tx, nil, "r") })
		}, store.ErrInvalid},
		{"Check(tx, &store.Fences{})", func(t *testing.T) error {
			return inTx(t, func(tx *gorm.DB) error { return gormfence.Check(tx, &store.Fences{}, "r") })
		}, store.ErrInvalid},
	}
}

// TestZeroValues calls every exported method on the zero value of its type and on a
// nil pointer, and the functions with zero arguments: each works or returns an error
// matching store.ErrInvalid, and none panics.
func TestZeroValues(t *testing.T) {
	for _, c := range zeroCalls() {
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
			}
		})
	}
}

// TestZeroValues_cover fails when an exported method of an exported type of the
// package has no row in zeroCalls, for its zero value and for a nil pointer.
func TestZeroValues_cover(t *testing.T) {
	var rows []string
	for _, c := range zeroCalls() {
		rows = append(rows, c.name)
	}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	methods := 0
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
			id, ok := typ.(*ast.Ident)
			if !ok || !id.IsExported() {
				continue
			}
			methods++
			for _, want := range []string{id.Name + "." + fn.Name.Name, "(*" + id.Name + ")(nil)." + fn.Name.Name} {
				if !slices.Contains(rows, want) {
					t.Errorf("no row %q in zeroCalls", want)
				}
			}
		}
	}
	if methods == 0 {
		t.Fatal("no exported methods found")
	}
}
