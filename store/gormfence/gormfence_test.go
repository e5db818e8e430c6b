package gormfence_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/store"
	"github.com/fencekit/fencekit/store/gormfence"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// Order is a fenced model.
type Order struct {
	ID         int64 `gorm:"primaryKey;autoIncrement:false"`
	Status     string
	Amount     int64
	FenceToken int64 `gorm:"not null;default:0"`
}

// Doc is a fenced model with soft deletes.
type Doc struct {
	ID         int64 `gorm:"primaryKey;autoIncrement:false"`
	Body       string
	FenceToken int64 `gorm:"not null;default:0"`
	DeletedAt  gorm.DeletedAt
}

// Note has no fence column: the plugin leaves it alone.
type Note struct {
	ID   int64 `gorm:"primaryKey;autoIncrement:false"`
	Text string
}

// tok returns a context carrying token.
func tok(t *testing.T, token int64) context.Context {
	return fencing.ContextWithToken(t.Context(), token)
}

// mustCreate creates orders under token.
func mustCreate(t *testing.T, db *gorm.DB, token int64, rows ...any) {
	t.Helper()
	for _, r := range rows {
		if err := db.WithContext(tok(t, token)).Create(r).Error; err != nil {
			t.Fatalf("create %+v under token %d: %v", r, token, err)
		}
	}
}

// order reads an order, soft-deleted or not; ok is false when it does not exist.
func order(t *testing.T, db *gorm.DB, id int64) (o Order, ok bool) {
	t.Helper()
	err := db.WithContext(t.Context()).Take(&o, id).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return o, false
	}
	if err != nil {
		t.Fatalf("read order %d: %v", id, err)
	}
	return o, true
}

// wantStale fails t unless err is a StaleTokenError for token with mark.
func wantStale(t *testing.T, err error, token, mark int64) {
	t.Helper()
	var stale *store.StaleTokenError
	if !errors.As(err, &stale) || !errors.Is(err, store.ErrStaleToken) {
		t.Fatalf("got %v, want a StaleTokenError", err)
	}
	if stale.Token != token || stale.Mark != mark {
		t.Errorf("got token %d, mark %d; want %d, %d (%v)", stale.Token, stale.Mark, token, mark, err)
	}
}

// writer is a verb of GORM writing status into order id.
type writer struct {
	name    string
	deletes bool
	write   func(db *gorm.DB, id int64, status string) error
}

var verbs = []writer{
	{"Update", false, func(db *gorm.DB, id int64, s string) error {
		return db.Model(&Order{ID: id}).Update("status", s).Error
	}},
	{"Updates map", false, func(db *gorm.DB, id int64, s string) error {
		return db.Model(&Order{ID: id}).Updates(map[string]any{"status": s}).Error
	}},
	{"Updates struct", false, func(db *gorm.DB, id int64, s string) error {
		return db.Model(&Order{ID: id}).Updates(Order{Status: s}).Error
	}},
	{"Updates where", false, func(db *gorm.DB, id int64, s string) error {
		return db.Model(&Order{}).Where("id = ?", id).Updates(map[string]any{"status": s}).Error
	}},
	{"UpdateColumn", false, func(db *gorm.DB, id int64, s string) error {
		return db.Model(&Order{ID: id}).UpdateColumn("status", s).Error
	}},
	{"UpdateColumns", false, func(db *gorm.DB, id int64, s string) error {
		return db.Model(&Order{ID: id}).UpdateColumns(Order{Status: s}).Error
	}},
	{"Save", false, func(db *gorm.DB, id int64, s string) error {
		o := Order{ID: id, Status: s, Amount: 1}
		return db.Save(&o).Error
	}},
	{"Delete", true, func(db *gorm.DB, id int64, _ string) error {
		return db.Delete(&Order{ID: id}).Error
	}},
	{"Delete by condition", true, func(db *gorm.DB, id int64, _ string) error {
		return db.Delete(&Order{}, id).Error
	}},
}

// TestVerbs runs each write verb fresh, stale, again under the same token, and on a
// missing row.
func TestVerbs(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		db := newDB(t, b, nil, &Order{})
		for i, v := range verbs {
			t.Run(v.name, func(t *testing.T) {
				id, missing := int64(i*10+1), int64(i*10+9)
				mustCreate(t, db, 5, &Order{ID: id, Status: "v5"})

				err := v.write(db.WithContext(tok(t, 4)), id, "v4")
				wantStale(t, err, 4, 5)
				if o, ok := order(t, db, id); !ok || o.Status != "v5" || o.FenceToken != 5 {
					t.Errorf("after the stale write: got %+v (exists %v), want it untouched", o, ok)
				}

				if err := v.write(db.WithContext(tok(t, 6)), id, "v6"); err != nil {
					t.Fatalf("token 6: got %v, want nil", err)
				}
				o, ok := order(t, db, id)
				switch {
				case v.deletes && ok:
					t.Errorf("after delete: got %+v, want no row", o)
				case !v.deletes && (o.Status != "v6" || o.FenceToken != 6):
					t.Errorf("after token 6: got %+v, want status v6, mark 6", o)
				}
				if !v.deletes {
					// The same holder writes the same values again (MySQL counts no changed row).
					if err := v.write(db.WithContext(tok(t, 6)), id, "v6"); err != nil {
						t.Errorf("token 6 again: got %v, want nil", err)
					}
				}

				err = v.write(db.WithContext(tok(t, 7)), missing, "v7")
				if !errors.Is(err, gorm.ErrRecordNotFound) || errors.Is(err, store.ErrStaleToken) {
					t.Errorf("missing row: got %v, want gorm.ErrRecordNotFound", err)
				}
				if o, ok := order(t, db, missing); ok {
					t.Errorf("missing row: got %+v written, want none (no fallback to an upsert)", o)
				}
			})
		}
	})
}

func TestSoftDelete(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		db := newDB(t, b, nil, &Doc{})
		mustCreate(t, db, 5, &Doc{ID: 1, Body: "a"})
		wantStale(t, db.WithContext(tok(t, 4)).Delete(&Doc{ID: 1}).Error, 4, 5)
		var d Doc
		if err := db.Take(&d, 1).Error; err != nil {
			t.Fatalf("after the stale delete: %v, want the doc", err)
		}
		if err := db.WithContext(tok(t, 6)).Delete(&Doc{ID: 1}).Error; err != nil {
			t.Fatalf("Delete(6): %v", err)
		}
		if err := db.Unscoped().Take(&d, 1).Error; err != nil || !d.DeletedAt.Valid || d.FenceToken != 6 {
			t.Errorf("after the soft delete: got %+v, %v; want deleted with mark 6", d, err)
		}
		// Soft-deleted: a later write finds no row.
		err := db.WithContext(tok(t, 7)).Model(&Doc{ID: 1}).Update("body", "b").Error
		if !errors.Is(err, gorm.ErrRecordNotFound) {
			t.Errorf("update of a soft-deleted doc: got %v, want gorm.ErrRecordNotFound", err)
		}
	})
}

func TestUpsert(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		db := newDB(t, b, nil, &Order{})
		all := clause.OnConflict{UpdateAll: true}
		status := clause.OnConflict{Columns: []clause.Column{{Name: "id"}}, DoUpdates: clause.AssignmentColumns([]string{"status"})}
		steps := []struct {
			name      string
			conflict  clause.OnConflict
			token     int64
			wantStale bool
			wantMark  int64
		}{
			{"insert", all, 5, false, 5},
			{"update all", all, 6, false, 6},
			{"update all, same token", all, 6, false, 6},
			{"update all, stale", all, 4, true, 6},
			{"update status", status, 7, false, 7},
			{"update status, stale", status, 3, true, 7},
		}
		for i, s := range steps {
			value := fmt.Sprintf("s%d", i)
			err := db.WithContext(tok(t, s.token)).Clauses(s.conflict).Create(&Order{ID: 1, Status: value}).Error
			if s.wantStale {
				wantStale(t, err, s.token, s.wantMark)
			} else if err != nil {
				t.Fatalf("%s: got %v, want nil", s.name, err)
			}
			o, _ := order(t, db, 1)
			if o.FenceToken != s.wantMark || (o.Status == value) == s.wantStale {
				t.Errorf("%s: got %+v, want mark %d (stale %v)", s.name, o, s.wantMark, s.wantStale)
			}
		}
		if err := db.WithContext(tok(t, 1)).Clauses(clause.OnConflict{DoNothing: true}).Create(&Order{ID: 1, Status: "x"}).Error; err != nil {
			t.Errorf("DoNothing: got %v, want nil", err)
		}

		// Several rows, one of them stale: none is written.
		err := db.WithContext(tok(t, 5)).Clauses(all).Create(&[]Order{{ID: 2, Status: "new"}, {ID: 1, Status: "old"}}).Error
		wantStale(t, err, 5, 7)
		if o, ok := order(t, db, 2); ok {
			t.Errorf("row 2 of a refused upsert: got %+v, want none", o)
		}
		// Save of a slice is an upsert too.
		err = db.WithContext(tok(t, 2)).Save(&[]Order{{ID: 1, Status: "saved"}}).Error
		wantStale(t, err, 2, 7)
		if err := db.WithContext(tok(t, 8)).Save(&[]Order{{ID: 1, Status: "saved"}, {ID: 3, Status: "three"}}).Error; err != nil {
			t.Errorf("Save of a slice under token 8: got %v, want nil", err)
		}
		if o, _ := order(t, db, 1); o.Status != "saved" || o.FenceToken != 8 {
			t.Errorf("after Save of a slice: got %+v, want status saved, mark 8", o)
		}
	})
}

func TestZeroValuesAndSelect(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		db := newDB(t, b, nil, &Order{})
		mustCreate(t, db, 1, &Order{ID: 1, Status: "a", Amount: 10})
		steps := []struct {
			name  string
			token int64
			write func(db *gorm.DB) *gorm.DB
			want  Order
		}{
			{"struct with zero values", 2, func(db *gorm.DB) *gorm.DB {
				return db.Model(&Order{ID: 1}).Updates(Order{Status: "b"})
			}, Order{ID: 1, Status: "b", Amount: 10, FenceToken: 2}},
			{"Select of another column", 3, func(db *gorm.DB) *gorm.DB {
				return db.Model(&Order{ID: 1}).Select("status").Updates(Order{Status: "c", Amount: 99})
			}, Order{ID: 1, Status: "c", Amount: 10, FenceToken: 3}},
			{"Select writes a zero value", 4, func(db *gorm.DB) *gorm.DB {
				return db.Model(&Order{ID: 1}).Select("Amount").Updates(Order{})
			}, Order{ID: 1, Status: "c", Amount: 0, FenceToken: 4}},
			{"Omit of the column", 5, func(db *gorm.DB) *gorm.DB {
				return db.Model(&Order{ID: 1}).Omit("fence_token").Updates(map[string]any{"status": "d"})
			}, Order{ID: 1, Status: "d", FenceToken: 5}},
			{"the column's own value is replaced", 6, func(db *gorm.DB) *gorm.DB {
				return db.Model(&Order{ID: 1}).Updates(map[string]any{"status": "e", "FenceToken": int64(1)})
			}, Order{ID: 1, Status: "e", FenceToken: 6}},
			{"Save of a loaded row", 7, func(db *gorm.DB) *gorm.DB {
				o, _ := order(t, db, 1)
				o.Status = "f"
				return db.Save(&o)
			}, Order{ID: 1, Status: "f", FenceToken: 7}},
		}
		for _, s := range steps {
			if err := s.write(db.WithContext(tok(t, s.token))).Error; err != nil {
				t.Fatalf("%s: got %v, want nil", s.name, err)
			}
			if got, _ := order(t, db, 1); got != s.want {
				t.Errorf("%s: got %+v, want %+v", s.name, got, s.want)
			}
		}
		err := db.WithContext(tok(t, 6)).Model(&Order{ID: 1}).Select("status").Updates(Order{Status: "stale"}).Error
		wantStale(t, err, 6, 7)
		// The caller's map is left as it was.
		m := map[string]any{"status": "g"}
		if err := db.WithContext(tok(t, 8)).Model(&Order{ID: 1}).Updates(m).Error; err != nil || len(m) != 1 {
			t.Errorf("Updates(map): got %v, map %v; want nil and the map untouched", err, m)
		}
		// The model reflects the row.
		o := Order{ID: 1}
		if err := db.WithContext(tok(t, 9)).Model(&o).Update("status", "h").Error; err != nil || o.FenceToken != 9 {
			t.Errorf("Update: got %v, model %+v; want the model's column 9", err, o)
		}
	})
}

func TestNoToken(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		db := newDB(t, b, nil, &Order{}, &Note{})
		mustCreate(t, db, 5, &Order{ID: 1, Status: "a"})
		ctx := t.Context()
		writes := map[string]error{
			"Update": db.WithContext(ctx).Model(&Order{ID: 1}).Update("status", "x").Error,
			"Save":   db.WithContext(ctx).Save(&Order{ID: 1, Status: "x"}).Error,
			"Delete": db.WithContext(ctx).Delete(&Order{ID: 1}).Error,
			"Create": db.WithContext(ctx).Create(&Order{ID: 2, Status: "x"}).Error,
		}
		for name, err := range writes {
			if !errors.Is(err, gormfence.ErrNoToken) {
				t.Errorf("%s without a token: got %v, want ErrNoToken", name, err)
			}
		}
		if o, _ := order(t, db, 1); o.Status != "a" || o.FenceToken != 5 {
			t.Errorf("after the refused writes: got %+v, want it untouched", o)
		}
		if _, ok := order(t, db, 2); ok {
			t.Error("a create without a token wrote a row")
		}
		// A model without the column is not fenced.
		if err := db.WithContext(ctx).Create(&Note{ID: 1, Text: "n"}).Error; err != nil {
			t.Errorf("Create of an unfenced model: got %v, want nil", err)
		}
		if err := db.WithContext(ctx).Model(&Note{ID: 1}).Update("text", "m").Error; err != nil {
			t.Errorf("Update of an unfenced model: got %v, want nil", err)
		}

		// AllowUnfenced: written as if the plugin were absent.
		open := reopen(t, db)
		if err := open.Use(gormfence.New(gormfence.AllowUnfenced())); err != nil {
			t.Fatal(err)
		}
		if err := open.WithContext(ctx).Model(&Order{ID: 1}).Update("status", "y").Error; err != nil {
			t.Errorf("AllowUnfenced: Update without a token: got %v, want nil", err)
		}
		if o, _ := order(t, db, 1); o.Status != "y" || o.FenceToken != 5 {
			t.Errorf("AllowUnfenced: got %+v, want status y, mark 5", o)
		}
		// A token is still checked when there is one.
		wantStale(t, open.WithContext(tok(t, 4)).Model(&Order{ID: 1}).Update("status", "z").Error, 4, 5)
	})
}

func TestMissingWhere(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		db := newDB(t, b, nil, &Order{})
		mustCreate(t, db, 5, &Order{ID: 1, Status: "a"}, &Order{ID: 2, Status: "b"})
		ctx := tok(t, 6)
		if err := db.WithContext(ctx).Model(&Order{}).Updates(map[string]any{"status": "all"}).Error; !errors.Is(err, gorm.ErrMissingWhereClause) {
			t.Errorf("Updates without conditions: got %v, want gorm.ErrMissingWhereClause", err)
		}
		if err := db.WithContext(ctx).Delete(&Order{}).Error; !errors.Is(err, gorm.ErrMissingWhereClause) {
			t.Errorf("Delete without conditions: got %v, want gorm.ErrMissingWhereClause", err)
		}
		if o, _ := order(t, db, 2); o.Status != "b" {
			t.Errorf("got %+v, want it untouched", o)
		}
		// AllowGlobalUpdate: every row, fenced.
		err := db.Session(&gorm.Session{AllowGlobalUpdate: true}).WithContext(ctx).Model(&Order{}).Update("status", "all").Error
		if err != nil {
			t.Errorf("AllowGlobalUpdate: got %v, want nil", err)
		}
		if o, _ := order(t, db, 2); o.Status != "all" || o.FenceToken != 6 {
			t.Errorf("AllowGlobalUpdate: got %+v, want status all, mark 6", o)
		}
	})
}

// TestSeveralRows: a statement over several rows is refused as a whole when one row
// holds a newer token, also when its conditions are joined by OR.
func TestSeveralRows(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		db := newDB(t, b, nil, &Order{})
		mustCreate(t, db, 9, &Order{ID: 1, Status: "a"})
		mustCreate(t, db, 1, &Order{ID: 2, Status: "b"}, &Order{ID: 3, Status: "c"})
		err := db.WithContext(tok(t, 5)).Model(&Order{}).Where("status = ?", "a").Or("status = ?", "b").
			Updates(map[string]any{"amount": 5}).Error
		wantStale(t, err, 5, 9)
		for id := int64(1); id <= 3; id++ {
			if o, _ := order(t, db, id); o.Amount != 0 {
				t.Errorf("order %d: got %+v, want it untouched", id, o)
			}
		}
		// Without the stale row, OR stays inside its parentheses: c is not written.
		if err := db.WithContext(tok(t, 5)).Model(&Order{}).Where("status = ?", "b").Or("status = ?", "zzz").
			Updates(map[string]any{"amount": 5}).Error; err != nil {
			t.Fatalf("got %v, want nil", err)
		}
		if o, _ := order(t, db, 3); o.Amount != 0 {
			t.Errorf("order 3: got %+v, want it untouched", o)
		}
		if o, _ := order(t, db, 2); o.Amount != 5 || o.FenceToken != 5 {
			t.Errorf("order 2: got %+v, want amount 5, mark 5", o)
		}
	})
}

func TestInitialize(t *testing.T) {
	db := openSQLite(t, prefix())
	if err := db.Use(gormfence.New(gormfence.WithColumn(""))); err == nil {
		t.Error("Use with an empty column: got nil, want an error")
	}
	if got := gormfence.New(nil).Name(); got != "gormfence" {
		t.Errorf("Name: got %q, want gormfence", got)
	}
}
