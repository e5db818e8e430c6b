package errorstest

import (
	"database/sql"
	"testing"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/store"
)

const storePrefix = "store: "

func storeCases() []errCase {
	stale := []error{store.ErrStaleToken}
	notFound := []error{store.ErrNotFound}
	invalid := []error{store.ErrInvalid, fencing.ErrInvalid}
	var nilMemory *store.Memory
	nothing := func(*sql.Tx) error { return nil }
	// fenced returns a database whose fence row of "r" holds 9, and the Fences.
	fenced := func(t *testing.T) (*sql.DB, *store.Fences) {
		db, fences, _ := sqlDB(t)
		f := store.NewFences(fences)
		if err := f.Check(t.Context(), db, "r", 9); err != nil {
			t.Fatal(err)
		}
		return db, f
	}
	// table returns a database whose row "1" holds the mark 9, and its Table.
	table := func(t *testing.T) (*sql.DB, *store.Table) {
		db, _, rows := sqlDB(t)
		insertRow(t, db, rows, "1", 9)
		tb, err := store.NewTable(rows)
		if err != nil {
			t.Fatal(err)
		}
		return db, tb
	}
	return []errCase{
		{"store.Memory.Write/ErrStaleToken", storePrefix, stale, func(t *testing.T) error {
			var m store.Memory
			if err := m.Admit("r", 9); err != nil {
				t.Fatal(err)
			}
			return m.Write("r", 7, func() error { return nil })
		}},
		{"store.Memory.Admit/ErrStaleToken", storePrefix, stale, func(t *testing.T) error {
			var m store.Memory
			if err := m.Admit("r", 9); err != nil {
				t.Fatal(err)
			}
			return m.Admit("r", 7)
		}},
		{"store.Memory.Write/ErrInvalid/nil-func", storePrefix, invalid, func(t *testing.T) error {
			var m store.Memory
			return m.Write("r", 7, nil)
		}},
		{"store.Memory.Admit/ErrInvalid/token", storePrefix, invalid, func(t *testing.T) error {
			var m store.Memory
			return m.Admit("r", 0)
		}},
		{"store.Memory.Admit/ErrInvalid/nil", storePrefix, invalid, func(t *testing.T) error {
			return nilMemory.Admit("r", 7)
		}},
		{"store.Redis.Write/ErrStaleToken", storePrefix, stale, func(t *testing.T) error {
			e := newEnv(t)
			s := store.NewRedis(e.r.Client)
			key := e.r.Prefix + "record"
			if err := s.Write(t.Context(), key, 9, "new"); err != nil {
				t.Fatal(err)
			}
			return s.Write(t.Context(), key, 7, "late")
		}},
		{"store.Redis.Read/ErrNotFound", storePrefix, notFound, func(t *testing.T) error {
			e := newEnv(t)
			_, _, err := store.NewRedis(e.r.Client).Read(t.Context(), e.r.Prefix+"record")
			return err
		}},
		{"store.Redis.Write/ErrInvalid", storePrefix, invalid, func(t *testing.T) error {
			return store.NewRedis(newEnv(t).r.Client).Write(t.Context(), "", 7, "x")
		}},
		{"store.Redis.Read/ErrInvalid", storePrefix, invalid, func(t *testing.T) error {
			_, _, err := store.NewRedis(nil).Read(t.Context(), "k")
			return err
		}},
		{"store.Fences.Tx/ErrStaleToken", storePrefix, stale, func(t *testing.T) error {
			db, f := fenced(t)
			return f.Tx(t.Context(), db, "r", 7, nothing)
		}},
		{"store.Fences.Check/ErrStaleToken", storePrefix, stale, func(t *testing.T) error {
			db, f := fenced(t)
			return f.Check(t.Context(), db, "r", 7)
		}},
		{"store.Fences.Mark/ErrNotFound", storePrefix, notFound, func(t *testing.T) error {
			db, f := fenced(t)
			_, err := f.Mark(t.Context(), db, "other")
			return err
		}},
		{"store.Fences.Tx/ErrInvalid/token", storePrefix, invalid, func(t *testing.T) error {
			db, f := fenced(t)
			return f.Tx(t.Context(), db, "r", 0, nothing)
		}},
		{"store.Fences.Tx/ErrInvalid/nil-func", storePrefix, invalid, func(t *testing.T) error {
			db, f := fenced(t)
			return f.Tx(t.Context(), db, "r", 7, nil)
		}},
		{"store.Fences.Tx/ErrInvalid/nil-db", storePrefix, invalid, func(t *testing.T) error {
			return store.NewFences("fences").Tx(t.Context(), nil, "r", 7, nothing)
		}},
		{"store.Fences.Tx/ErrInvalid/zero", storePrefix, invalid, func(t *testing.T) error {
			db, _, _ := sqlDB(t)
			return new(store.Fences).Tx(t.Context(), db, "r", 7, nothing)
		}},
		{"store.Table.Update/ErrStaleToken", storePrefix, stale, func(t *testing.T) error {
			db, tb := table(t)
			return tb.Update(t.Context(), db, "1", 7, "")
		}},
		{"store.Table.Update/ErrNotFound", storePrefix, notFound, func(t *testing.T) error {
			db, tb := table(t)
			return tb.Update(t.Context(), db, "2", 7, "")
		}},
		{"store.Table.Mark/ErrNotFound", storePrefix, notFound, func(t *testing.T) error {
			db, tb := table(t)
			_, err := tb.Mark(t.Context(), db, "2")
			return err
		}},
		{"store.Table.Update/ErrInvalid", storePrefix, invalid, func(t *testing.T) error {
			db, tb := table(t)
			return tb.Update(t.Context(), db, nil, 7, "")
		}},
		{"store.NewTable/ErrInvalid", storePrefix, invalid, func(t *testing.T) error {
			_, err := store.NewTable("")
			return err
		}},
	}
}

func TestStore(t *testing.T) {
	t.Parallel()
	run(t, storeCases())
}
