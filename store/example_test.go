package store_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/alicebob/miniredis/v2"
	"github.com/fencekit/fencekit/store"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/redis/go-redis/v9"
)

func ExampleMemory_Write() {
	var guard store.Memory // the zero value is ready to use
	balance := 0
	deposit := func(token int64, amount int) error {
		return guard.Write("account:42", token, func() error {
			balance += amount // runs only for an admissible token
			return nil
		})
	}

	fmt.Println(deposit(7, 10)) // the holder of token 7 writes
	fmt.Println(deposit(7, 5))  // and writes again: equal tokens are admitted
	err := deposit(6, 100)      // an earlier holder whose lease lapsed wakes up
	fmt.Println(errors.Is(err, store.ErrStaleToken))
	fmt.Println(err)
	fmt.Println(balance, guard.Mark("account:42"))
	// Output:
	// <nil>
	// <nil>
	// true
	// store: stale fencing token 6 for "account:42" (high-water mark 7)
	// 15 7
}

func ExampleRedis_Write() {
	// miniredis: a stand-in for your Redis.
	mr, err := miniredis.Run()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()

	ctx := context.Background()
	reports := store.NewRedis(rdb)
	if err := reports.Write(ctx, "report:2024", 12, "draft by holder 12"); err != nil {
		fmt.Println(err)
	}
	err = reports.Write(ctx, "report:2024", 11, "late draft by holder 11")
	var stale *store.StaleTokenError
	if errors.As(err, &stale) {
		fmt.Printf("refused token %d: mark is %d\n", stale.Token, stale.Mark)
	}
	// Tokens are compared exactly, even above 2^53.
	if err := reports.Write(ctx, "report:2024", 9007199254740993, "final"); err != nil {
		fmt.Println(err)
	}
	err = reports.Write(ctx, "report:2024", 9007199254740992, "older")
	fmt.Println(errors.Is(err, store.ErrStaleToken))

	value, mark, err := reports.Read(ctx, "report:2024")
	fmt.Println(value, mark, err)
	_, _, err = reports.Read(ctx, "report:2025")
	fmt.Println(errors.Is(err, store.ErrNotFound))
	// Output:
	// refused token 11: mark is 12
	// true
	// final 9007199254740993 <nil>
	// true
}

// The conditional update for a PostgreSQL table that has gained the column
//
//	ALTER TABLE accounts ADD COLUMN fence_token BIGINT NOT NULL DEFAULT 0;
//
// This example needs a database, so it is compiled but not run.
func ExampleTable_Update() {
	ctx := context.Background()
	db, err := sql.Open("pgx", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer db.Close()
	accounts, err := store.NewTable("accounts")
	if err != nil {
		fmt.Println(err)
		return
	}

	var token int64 = 42 // the fencing token of the lock held on account 7
	// UPDATE accounts SET balance = balance + $1, fence_token = $2
	// WHERE id = $3 AND fence_token <= $4
	err = accounts.Update(ctx, db, 7, token, "balance = balance + $1", 100)
	switch {
	case errors.Is(err, store.ErrStaleToken):
		fmt.Println("a newer lock holder has written; dropping this write")
	case errors.Is(err, store.ErrNotFound):
		fmt.Println("no account 7")
	case err != nil:
		fmt.Println(err)
	}
}

// Upsert creates the row or overwrites it, fenced, in one PostgreSQL statement. This
// example needs a database, so it is compiled but not run.
func ExampleTable_Upsert() {
	ctx := context.Background()
	db, err := sql.Open("pgx", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer db.Close()
	reports, err := store.NewTable("reports", store.WithIDColumn("name"))
	if err != nil {
		fmt.Println(err)
		return
	}
	var token int64 = 42 // the fencing token of the lock held on the report
	err = reports.Upsert(ctx, db, "2024-q4", token, []string{"body", "status"}, "...", "final")
	if errors.Is(err, store.ErrStaleToken) {
		fmt.Println("a newer lock holder has written; dropping this write")
	}
}

// Tx fences a whole transaction: it begins it, runs Check first, then the function,
// and commits, or rolls back when the token is stale or the function fails. This
// example needs a database, so it is compiled but not run.
func ExampleFences_Tx() {
	ctx := context.Background()
	db, err := sql.Open("pgx", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer db.Close()
	fences := store.NewFences("fences")
	if err := fences.CreateTable(ctx, db); err != nil { // or in a migration
		fmt.Println(err)
		return
	}

	var token int64 = 42 // the fencing token of the lock held on payout 42
	err = fences.Tx(ctx, db, "payout:42", token, func(tx *sql.Tx) error {
		// Every statement here is fenced, reads included, whatever library runs it.
		if _, err := tx.ExecContext(ctx, "UPDATE payouts SET status = 'paid' WHERE id = $1", 42); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, "INSERT INTO ledger (payout, amount) VALUES ($1, $2)", 42, -100)
		return err
	})
	switch {
	case errors.Is(err, store.ErrStaleToken):
		fmt.Println("a newer lock holder has committed; nothing was written")
	case err != nil:
		fmt.Println(err)
	}
}

// PgxTx on a pool whose sessions run at REPEATABLE READ: a newer holder that commits
// while this transaction's Check waits for it fails the transaction with a
// serialization failure, and the whole transaction is retried. This example needs a
// database, so it is compiled but not run.
func ExampleFences_PgxTx() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"+
		"&default_transaction_isolation=repeatable%20read")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()
	fences := store.NewFences("fences")

	token := func() int64 { return 42 } // lock.Token(), read again for each attempt
	for attempt := 1; ; attempt++ {
		err = fences.PgxTx(ctx, pool, "payout:42", token(), func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, "UPDATE payouts SET status = 'paid' WHERE id = $1", 42)
			return err
		})
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "40001" && attempt < 3 {
			continue // serialization failure: run the whole transaction again
		}
		break
	}
	if errors.Is(err, store.ErrStaleToken) {
		fmt.Println("a newer lock holder has committed; nothing was written")
	}
}
