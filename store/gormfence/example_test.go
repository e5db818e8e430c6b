package gormfence_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/fencekit/fencekit/fencing"
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
