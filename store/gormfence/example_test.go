package gormfence_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/fencing/fencingtest"
	"github.com/fencekit/fencekit/store"
	"github.com/fencekit/fencekit/store/gormfence"
	"github.com/glebarez/sqlite"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"
)

// Payout is a fenced model: its table has the fence_token column.
type Payout struct {
	ID         int64 `gorm:"primaryKey;autoIncrement:false"`
	Status     string
	FenceToken int64 `gorm:"not null;default:0"`
}

func Example() {
	// SQLite in memory (pure Go) stands in for your database.
	db, err := gorm.Open(sqlite.Open(":memory:"), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		fmt.Println(err)
		return
	}
	sqlDB, _ := db.DB()
	sqlDB.SetMaxOpenConns(1) // one in-memory database
	if err := db.Use(gormfence.New()); err != nil {
		fmt.Println(err)
		return
	}
	_ = db.AutoMigrate(&Payout{})

	// Inside locker.Do(ctx, "payout:1", …) the context carries the lock's token; here
	// fencing.ContextWithToken stands in for two holders, 7 and a later 8.
	holder7 := fencing.ContextWithToken(context.Background(), 7)
	holder8 := fencing.ContextWithToken(context.Background(), 8)

	fmt.Println(db.WithContext(holder7).Create(&Payout{ID: 1, Status: "pending"}).Error)
	fmt.Println(db.WithContext(holder8).Model(&Payout{ID: 1}).Updates(map[string]any{"status": "paid"}).Error)

	// Holder 7 paused past its lease and wakes up: its write is refused.
	err = db.WithContext(holder7).Model(&Payout{ID: 1}).Updates(map[string]any{"status": "failed"}).Error
	fmt.Println(errors.Is(err, store.ErrStaleToken))
	fmt.Println(err)

	// A missing row is not a stale token; a write without a token is refused.
	err = db.WithContext(holder8).Model(&Payout{ID: 2}).Update("status", "paid").Error
	fmt.Println(errors.Is(err, gorm.ErrRecordNotFound))
	err = db.Model(&Payout{ID: 1}).Update("status", "x").Error
	fmt.Println(errors.Is(err, gormfence.ErrNoToken))

	var p Payout
	db.Take(&p, 1)
	fmt.Println(p.Status, p.FenceToken)
	// Output:
	// <nil>
	// <nil>
	// true
	// store: stale fencing token 7 for "payouts/1" (high-water mark 8)
	// true
	// true
	// paid 8
}

// Check fences a whole transaction, its reads and raw SQL included, with a fence row.
func ExampleCheck() {
	db, err := gorm.Open(sqlite.Open(":memory:"), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		fmt.Println(err)
		return
	}
	sqlDB, _ := db.DB()
	sqlDB.SetMaxOpenConns(1)
	fences := store.NewFences("fences")
	if err := fences.CreateTable(context.Background(), sqlDB); err != nil {
		fmt.Println(err)
		return
	}
	_ = db.Exec("CREATE TABLE ledger (entry TEXT)").Error

	transfer := func(token int64, entry string) error {
		ctx := fencing.ContextWithToken(context.Background(), token)
		return db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
			if err := gormfence.Check(tx, fences, "account:42"); err != nil {
				return err // a newer holder has committed: roll back
			}
			return tx.Exec("INSERT INTO ledger (entry) VALUES (?)", entry).Error
		})
	}
	fmt.Println(transfer(3, "by holder 3"))
	fmt.Println(transfer(2, "by holder 2, late"))
	var n int64
	db.Table("ledger").Count(&n)
	fmt.Println(n)
	// Output:
	// <nil>
	// store: stale fencing token 2 for "fences/account:42" (high-water mark 3)
	// 1
}

// A test that a paused lock holder's transaction is refused, on SQL through store.Fences:
// fencingtest.Takeover runs the next holder's transaction between the stall and the paused
// holder's own, so the test needs no channels to order them.
func Example_takeover() {
	mr, err := miniredis.Run() // stands in for your Redis
	if err != nil {
		fmt.Println(err)
		return
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	locker := fencing.New(rdb)
	defer locker.Close()

	db, err := sql.Open("sqlite", ":memory:") // SQLite in memory (pure Go): your database
	if err != nil {
		fmt.Println(err)
		return
	}
	defer db.Close()
	db.SetMaxOpenConns(1) // one in-memory database
	ctx := context.Background()
	fences := store.NewFences("fences")
	if err := fences.CreateTable(ctx, db); err != nil {
		fmt.Println(err)
		return
	}
	_, _ = db.ExecContext(ctx, "CREATE TABLE seats (id INTEGER PRIMARY KEY, holder TEXT)")
	_, _ = db.ExecContext(ctx, "INSERT INTO seats (id) VALUES (7)")

	// The service's code: book seat 7 for holder under the event's lock.
	book := func(ctx context.Context, holder string) error {
		token, _ := fencing.TokenFromContext(ctx)
		return fences.Tx(ctx, db, "event:1", token, func(tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, "UPDATE seats SET holder = ? WHERE id = 7", holder)
			return err
		})
	}

	err = locker.Do(ctx, "event:1", func(ctx context.Context) error {
		// This worker pauses past its lease; the next takes the lock and books the seat.
		if err := fencingtest.Takeover(ctx, func(ctx context.Context) error { return book(ctx, "bob") }); err != nil {
			return err
		}
		err := book(ctx, "alice") // the paused worker wakes up and books late
		fmt.Println("the late booking refused:", errors.Is(err, store.ErrStaleToken))
		return err
	})
	fmt.Println("Do reports the lock lost:", errors.Is(err, fencing.ErrNotHeld))
	var holder string
	_ = db.QueryRowContext(ctx, "SELECT holder FROM seats WHERE id = 7").Scan(&holder)
	fmt.Println("seat 7 held by", holder)
	// Output:
	// the late booking refused: true
	// Do reports the lock lost: true
	// seat 7 held by bob
}
