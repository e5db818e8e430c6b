package fencing

import (
	"context"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// zeroCall is one exported method called on the zero value of its type, or on a nil pointer
// to it, with valid arguments otherwise.
type zeroCall struct {
	// name is "T.Method" for the zero value, "(*T)(nil).Method" for a nil pointer.
	name string
	call func() error
	// want is nil when the call must work, else the error it must match.
	want error
}

// zeroCalls returns a row for every exported method of every exported type of the package.
func zeroCalls(ctx context.Context) []zeroCall {
	fn := func(context.Context) error { return errors.New("fn called") }
	var (
		locker *Locker
		lock   *Lock
		set    *LockSet
		busy   *BusyError
		memo   *MemoError
	)
	no := func(what string, ok bool) error {
		if !ok {
			return errors.New(what)
		}
		return nil
	}
	lockerRows := func(name string, l *Locker) []zeroCall {
		return []zeroCall{
			{name + ".TryAcquire", func() error { _, err := l.TryAcquire(ctx, "r"); return err }, ErrInvalid},
			{name + ".Acquire", func() error { _, err := l.Acquire(ctx, "r"); return err }, ErrInvalid},
			{name + ".TryAcquireAll", func() error { _, err := l.TryAcquireAll(ctx, []string{"r"}); return err }, ErrInvalid},
			{name + ".AcquireAll", func() error { _, err := l.AcquireAll(ctx, []string{"r"}); return err }, ErrInvalid},
			{name + ".Do", func() error { return l.Do(ctx, "r", fn) }, ErrInvalid},
			{name + ".DoAll", func() error { return l.DoAll(ctx, []string{"r"}, fn) }, ErrInvalid},
			{name + ".Lead", func() error { return l.Lead(ctx, "r", fn) }, ErrInvalid},
			{name + ".Inspect", func() error { _, err := l.Inspect(ctx, "r"); return err }, ErrInvalid},
			{name + ".ForceRelease", func() error { return l.ForceRelease(ctx, "r", 1) }, ErrInvalid},
			{name + ".ReadMemo", func() error { _, _, err := l.ReadMemo(ctx, "r", "m"); return err }, ErrInvalid},
			{name + ".Err", l.Err, ErrInvalid},
			{name + ".Close", l.Close, nil},
			{name + ".Client", func() error { return no("Client is not nil", l.Client() == nil) }, nil},
			{name + ".Settings", func() error { _ = l.Settings(); return nil }, nil},
		}
	}
	lockRows := func(name string, k *Lock) []zeroCall {
		return []zeroCall{
			{name + ".Release", func() error { return k.Release(ctx) }, ErrInvalid},
			{name + ".ReleaseWith", func() error { return k.ReleaseWith(ctx, Memo{Name: "m", Value: "v", TTL: time.Minute}) }, ErrInvalid},
			{name + ".Extend", func() error { return k.Extend(ctx, time.Minute) }, ErrInvalid},
			{name + ".TTL", func() error { _, err := k.TTL(ctx); return err }, ErrInvalid},
			{name + ".Token", func() error { return no("Token is not 0", k.Token() == 0) }, nil},
			{name + ".Resource", func() error { return no("Resource is not empty", k.Resource() == "") }, nil},
			{name + ".Shared", func() error { return no("Shared is true", !k.Shared()) }, nil},
		}
	}
	setRows := func(name string, s *LockSet) []zeroCall {
		return []zeroCall{
			{name + ".Release", func() error { return s.Release(ctx) }, ErrInvalid},
			{name + ".Extend", func() error { return s.Extend(ctx, time.Minute) }, ErrInvalid},
			{name + ".Locks", func() error { return no("Locks is not empty", len(s.Locks()) == 0) }, nil},
			{name + ".Token", func() error { return no("Token is not 0", s.Token("r") == 0) }, nil},
		}
	}
	rows := slices.Concat(
		lockerRows("Locker", &Locker{}), lockerRows("(*Locker)(nil)", locker),
		lockRows("Lock", &Lock{}), lockRows("(*Lock)(nil)", lock),
		setRows("LockSet", &LockSet{}), setRows("(*LockSet)(nil)", set),
	)
	text := func(s, want string) error {
		if !strings.Contains(s, want) {
			return errors.New("Error() = " + s)
		}
		return nil
	}
	return append(rows,
		zeroCall{"BusyError.Error", func() error { return text((&BusyError{}).Error(), "not acquired") }, nil},
		zeroCall{"BusyError.Is", func() error { return no("Is(ErrNotAcquired) is false", errors.Is(&BusyError{}, ErrNotAcquired)) }, nil},
		zeroCall{"(*BusyError)(nil).Error", func() error { return text(busy.Error(), "not acquired") }, nil},
		zeroCall{"(*BusyError)(nil).Is", func() error { return no("Is(ErrNotAcquired) is false", busy.Is(ErrNotAcquired)) }, nil},
		zeroCall{"MemoError.Error", func() error { return text((&MemoError{}).Error(), "not acquired") }, nil},
		zeroCall{"MemoError.Is", func() error { return no("Is(ErrNotAcquired) is false", errors.Is(&MemoError{}, ErrNotAcquired)) }, nil},
		zeroCall{"(*MemoError)(nil).Error", func() error { return text(memo.Error(), "not acquired") }, nil},
		zeroCall{"(*MemoError)(nil).Is", func() error { return no("Is(ErrNotAcquired) is false", memo.Is(ErrNotAcquired)) }, nil},
	)
}

// TestZeroValues calls every exported method on the zero value of its type and on a nil
// pointer: each works or returns an error matching ErrInvalid, and never panics. The zero
// values have no client, so nothing can reach Redis.
func TestZeroValues(t *testing.T) {
	t.Parallel()
	for _, c := range zeroCalls(t.Context()) {
		t.Run(c.name, func(t *testing.T) {
			defer func() {
				if v := recover(); v != nil {
					t.Errorf("panicked: %v", v)
				}
			}()
			err := c.call()
			switch {
			case c.want == nil && err != nil:
				t.Errorf("got %v, want it to work", err)
			case c.want != nil && !errors.Is(err, c.want):
				t.Errorf("got %v, want an error matching %v", err, c.want)
			}
		})
	}
	// The constructor given nothing: a Locker without a client is a usable value whose calls
	// return ErrInvalid.
	l := New(nil)
	if err := l.Err(); !errors.Is(err, ErrInvalid) {
		t.Errorf("New(nil).Err(): got %v, want ErrInvalid", err)
	}
	if _, err := l.TryAcquire(t.Context(), "r"); !errors.Is(err, ErrInvalid) {
		t.Errorf("New(nil).TryAcquire: got %v, want ErrInvalid", err)
	}
	if err := l.Close(); err != nil {
		t.Errorf("New(nil).Close: %v", err)
	}
}

// TestZeroValuesCover fails when an exported method of an exported type of the package has
// no row in zeroCalls, for its zero value and for a nil pointer.
func TestZeroValuesCover(t *testing.T) {
	t.Parallel()
	var rows []string
	for _, c := range zeroCalls(t.Context()) {
		rows = append(rows, c.name)
	}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	n := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
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
			n++
			for _, want := range []string{id.Name + "." + fn.Name.Name, "(*" + id.Name + ")(nil)." + fn.Name.Name} {
				if !slices.Contains(rows, want) {
					t.Errorf("no row %q in zeroCalls", want)
				}
			}
		}
	}
	if n == 0 {
		t.Fatal("no exported methods found")
	}
}
