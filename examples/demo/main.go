// Command demo shows what fencing tokens buy: the same workload runs twice against a ledger
// of account balances, once with the store checking tokens and once without, and prints how
// many stale writes got through and how many updates were lost.
//
//	go run ./examples/demo                                   # embedded miniredis, in-memory ledger
//	REDIS_ADDR=127.0.0.1:6379 go run ./examples/demo         # a real Redis (or redis://host:port/db)
//	DATABASE_URL=postgres://postgres@127.0.0.1:5432/test?sslmode=disable go run ./examples/demo
//
// The workload: deposits to a few accounts arrive at once as HTTP requests through the Echo
// middleware and as Asynq jobs through the asynqfence adapter, each a read-modify-write under
// the account's lock. Meanwhile, a few holders pause past their lease (as in a long GC pause)
// between reading a balance and writing it back; another writer takes the lock and deposits,
// then the paused holder wakes and writes its stale balance. With token checks the store
// rejects that write; without, the other writer's deposit is lost.
//
// Transfers run beside the deposits, between accounts of their own: each locks both accounts
// at once with Locker.DoAll, through the Echo route POST /transfer/:from/:to (the
// middleware's KeysExtractor) and the Asynq task "transfer" (asynqfence.MiddlewareAll), and
// writes each account with its own token. Two-account holders pause past their lease too;
// the report says whether the transfers conserved the money and left every balance as the
// acknowledged transfers make it.
//
// The exit status is 0 only when the run with token checks accepted no stale write, lost no
// update, and its transfers conserved the money.
package main

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
)

func main() {
	cfg := config{
		redisAddr:   os.Getenv("REDIS_ADDR"),
		databaseURL: os.Getenv("DATABASE_URL"),
		accounts:    4,
		requests:    160,
		jobs:        80,
		pauses:      3,

		transferAccounts: 4,
		transfers:        80,
		transferJobs:     40,
	}
	code, err := run(context.Background(), cfg, os.Stdout, os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(2)
	}
	os.Exit(code)
}

// config sizes the workload.
type config struct {
	redisAddr   string // empty: embedded miniredis
	databaseURL string // empty: in-memory ledger
	accounts    int    // number of accounts
	requests    int    // deposits sent over HTTP
	jobs        int    // deposits run as Asynq jobs
	pauses      int    // paused holders per account

	transferAccounts int // accounts of the transfers (none: no transfers)
	transfers        int // transfers sent over HTTP (POST /transfer/:from/:to)
	transferJobs     int // transfers run as Asynq jobs
}

// run runs the workload with and without token checks, writes the report to out and
// progress to progress, and returns the exit status.
func run(ctx context.Context, cfg config, out, progress io.Writer) (int, error) {
	env, err := newEnv(cfg)
	if err != nil {
		return 0, err
	}
	defer env.close()
	if err := env.checkServer(ctx, progress); err != nil {
		return 0, err
	}

	var db *sql.DB
	if cfg.databaseURL != "" {
		db, err = sql.Open("pgx", cfg.databaseURL)
		if err != nil {
			return 0, err
		}
		defer db.Close()
	}
	newLedger := func(fenced bool) (ledger, error) {
		if db == nil {
			return newMemLedger(fenced), nil
		}
		return newSQLLedger(db, fmt.Sprintf("fencekit_demo_%d", os.Getpid()), fenced)
	}

	fmt.Fprintf(out, "fencekit demo: %d accounts; %d deposits over HTTP (Echo middleware), %d as Asynq jobs; %d holders paused past their lease\n",
		cfg.accounts, cfg.requests, cfg.jobs, cfg.accounts*cfg.pauses)
	if cfg.transferAccounts > 1 {
		fmt.Fprintf(out, "and %d accounts of transfers, each locking both accounts (DoAll): %d over HTTP, %d as Asynq jobs; %d two-account holders paused past their lease\n",
			cfg.transferAccounts, cfg.transfers, cfg.transferJobs, cfg.transferAccounts*cfg.pauses)
	}
	fmt.Fprintf(out, "Redis: %s; ledger: %s\n\n", env.where, ledgerName(db))

	var results [2]result
	for i, fenced := range []bool{true, false} {
		l, err := newLedger(fenced)
		if err != nil {
			return 0, err
		}
		results[i], err = env.runOnce(ctx, cfg, l, fenced, progress)
		if err != nil {
			return 0, err
		}
		if s, ok := l.(*sqlLedger); ok {
			_, _ = db.ExecContext(context.WithoutCancel(ctx), "DROP TABLE IF EXISTS "+s.name)
		}
	}
	report(out, results)
	with := results[0]
	if with.staleAccepted != 0 || with.lost != 0 || with.t.staleAccepted != 0 || with.t.money != 0 || with.t.off != 0 {
		fmt.Fprintln(out, "\nFAIL: the run with token checks let a stale write through")
		return 1, nil
	}
	fmt.Fprintln(out, "\nOK: with token checks no stale write was accepted, no update was lost and the transfers conserved the money")
	return 0, nil
}

func ledgerName(db *sql.DB) string {
	if db == nil {
		return "in memory (store.Memory)"
	}
	return "PostgreSQL (store.Table)"
}

// result is one run's figures.
type result struct {
	deposits      int64 // deposits the ledger acknowledged
	staleAccepted int64 // writes with a token below one already written, that got through
	staleRejected int64 // writes refused with store.ErrStaleToken
	lost          int64 // acknowledged deposits missing from the final balances
	elapsed       time.Duration
	t             transferResult
}

func report(out io.Writer, r [2]result) {
	rows := []struct {
		name string
		f    func(result) string
	}{
		{"deposits acknowledged", func(r result) string { return fmt.Sprint(r.deposits) }},
		{"stale writes accepted", func(r result) string { return fmt.Sprint(r.staleAccepted) }},
		{"stale writes rejected", func(r result) string { return fmt.Sprint(r.staleRejected) }},
		{"lost updates", func(r result) string { return fmt.Sprint(r.lost) }},
		{"transfers acknowledged", func(r result) string { return fmt.Sprint(r.t.transfers) }},
		{"transfer stale accepted", func(r result) string { return fmt.Sprint(r.t.staleAccepted) }},
		{"transfer stale rejected", func(r result) string { return fmt.Sprint(r.t.staleRejected) }},
		{"money made by transfers", func(r result) string { return fmt.Sprint(r.t.money) }},
		{"transfer balances off", func(r result) string { return fmt.Sprint(r.t.off) }},
		{"time", func(r result) string { return r.elapsed.Round(time.Millisecond).String() }},
	}
	fmt.Fprintf(out, "%-24s %18s %18s\n", "", "with token checks", "without")
	fmt.Fprintf(out, "%-24s %18s %18s\n", strings.Repeat("-", 24), strings.Repeat("-", 18), strings.Repeat("-", 18))
	for _, row := range rows {
		fmt.Fprintf(out, "%-24s %18s %18s\n", row.name, row.f(r[0]), row.f(r[1]))
	}
}
