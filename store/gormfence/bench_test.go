package gormfence_test

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"os"
	"sync/atomic"
	"testing"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/store"
	"github.com/fencekit/fencekit/store/gormfence"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
)

// statements counts the statements pgx sends (BEGIN and COMMIT included): in steady
// state, one round trip each.
type statements struct{ n atomic.Int64 }

func (s *statements) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	s.n.Add(1)
	return ctx
}

func (*statements) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// benchPostgres opens the PostgreSQL of FENCING_DATABASE_URL through database/sql
// with a statement counter, and two GORM handles on it: one with the plugin, one
// without. The tables are prefixed for the benchmark and dropped after it.
func benchPostgres(b *testing.B) (sqlDB *sql.DB, fenced, plain *gorm.DB, count *statements) {
	b.Helper()
	cfg, err := pgx.ParseConfig(serverDSN(b, envDatabaseURL, envRequirePostgres))
	if err != nil {
		b.Fatal(err)
	}
	count = &statements{}
	cfg.Tracer = count
	sqlDB = stdlib.OpenDB(*cfg)
	b.Cleanup(func() { _ = sqlDB.Close() })
	p := prefix()
	open := func() *gorm.DB {
		db, err := gorm.Open(postgres.New(postgres.Config{Conn: sqlDB}), gormConfig(p))
		if err != nil {
			b.Fatal(err)
		}
		return db
	}
	fenced, plain = open(), open()
	if err := fenced.Use(gormfence.New()); err != nil {
		b.Fatal(err)
	}
	if err := plain.AutoMigrate(&Order{}); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = plain.Migrator().DropTable(&Order{}) })
	return sqlDB, fenced, plain, count
}

// BenchmarkUpdates is GORM's Updates of one row by its primary key, in GORM's
// default transaction, with the plugin (fenced, token in the context) and without
// it, side by side; statements/op counts what pgx sent.
func BenchmarkUpdates(b *testing.B) {
	_, fenced, plain, count := benchPostgres(b)
	ctx := fencing.ContextWithToken(context.Background(), 7)
	if err := fenced.WithContext(ctx).Create(&Order{ID: 1, Status: "new"}).Error; err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		db   *gorm.DB
	}{{"unfenced", plain}, {"fenced", fenced}} {
		b.Run(c.name, func(b *testing.B) {
			db := c.db.WithContext(ctx)
			order := Order{ID: 1}
			count.n.Store(0)
			i := 0
			for b.Loop() {
				i++
				if err := db.Model(&order).Updates(map[string]any{"status": fmt.Sprint("s", i)}).Error; err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(count.n.Load())/float64(b.N), "statements/op")
		})
	}
}

// BenchmarkFencesCheck is a transaction of three UPDATEs through database/sql, alone
// and with store.Fences.Check as its first statement.
func BenchmarkFencesCheck(b *testing.B) {
	sqlDB, _, _, count := benchPostgres(b)
	ctx := context.Background()
	name := fmt.Sprintf("fk_gf_bench_%d_%x", os.Getpid(), rand.Uint32())
	fences := store.NewFences(name)
	if err := fences.CreateTable(ctx, sqlDB); err != nil {
		b.Fatal(err)
	}
	data := name + "_data"
	for _, q := range []string{
		"CREATE TABLE " + data + " (id INT PRIMARY KEY, v BIGINT NOT NULL)",
		"INSERT INTO " + data + " VALUES (1, 0), (2, 0), (3, 0)",
	} {
		if _, err := sqlDB.ExecContext(ctx, q); err != nil {
			b.Fatal(err)
		}
	}
	b.Cleanup(func() { _, _ = sqlDB.ExecContext(ctx, "DROP TABLE "+name+", "+data) })
	for _, check := range []bool{false, true} {
		b.Run(map[bool]string{false: "tx", true: "check+tx"}[check], func(b *testing.B) {
			count.n.Store(0)
			for b.Loop() {
				tx, err := sqlDB.BeginTx(ctx, nil)
				if err != nil {
					b.Fatal(err)
				}
				if check {
					if err := fences.Check(ctx, tx, "acct", 7); err != nil {
						b.Fatal(err)
					}
				}
				for id := 1; id <= 3; id++ {
					if _, err := tx.ExecContext(ctx, "UPDATE "+data+" SET v = v + 1 WHERE id = $1", id); err != nil {
						b.Fatal(err)
					}
				}
				if err := tx.Commit(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(count.n.Load())/float64(b.N), "statements/op")
		})
	}
}
