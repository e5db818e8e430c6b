package main

import (
	"bytes"
	"io"
	"os"
	"regexp"
	"strconv"
	"testing"
)

// TestDemo runs the demo on a small workload and checks its report's figures. It uses a
// real Redis when FENCING_REDIS_ADDR is set and PostgreSQL when FENCING_DATABASE_URL is.
//
// FENCING_REQUIRE_POSTGRES=1 without FENCING_DATABASE_URL fails the test, as it does in
// package store.
func TestDemo(t *testing.T) {
	if os.Getenv("FENCING_REQUIRE_POSTGRES") == "1" && os.Getenv("FENCING_DATABASE_URL") == "" {
		t.Fatal("FENCING_REQUIRE_POSTGRES=1 but FENCING_DATABASE_URL is not set")
	}
	cfg := config{
		redisAddr:   os.Getenv("FENCING_REDIS_ADDR"),
		databaseURL: os.Getenv("FENCING_DATABASE_URL"),
		accounts:    3,
		requests:    60,
		jobs:        30,
		pauses:      2,

		transferAccounts: 3,
		transfers:        40,
		transferJobs:     20,
	}
	var out bytes.Buffer
	code, err := run(t.Context(), cfg, &out, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + out.String())
	if code != 0 {
		t.Fatalf("exit status %d, want 0", code)
	}
	paused := int64(cfg.accounts * cfg.pauses)
	deposits := int64(cfg.requests+cfg.jobs) + paused // each pause includes one takeover deposit
	want := map[string][2]int64{
		"deposits acknowledged": {deposits, deposits + paused},
		"stale writes accepted": {0, paused},
		"stale writes rejected": {paused, 0},
	}
	for name, w := range want {
		got := figures(t, out.String(), name)
		if got != w {
			t.Errorf("%s: got %v, want %v", name, got, w)
		}
	}
	// Transfers: with checks, both rows of every paused two-account holder are refused (one
	// transaction), money is conserved and every balance is what the
	// acknowledged transfers make it; without, the paused holders' writes go through.
	tPaused := int64(cfg.transferAccounts * cfg.pauses)
	tWant := map[string][2]int64{
		"transfers acknowledged":  {int64(cfg.transfers+cfg.transferJobs) + tPaused, int64(cfg.transfers+cfg.transferJobs) + 2*tPaused},
		"transfer stale accepted": {0, -1},
		"transfer stale rejected": {2 * tPaused, 0},
		"money made by transfers": {0, -1},
		"transfer balances off":   {0, -1},
	}
	for name, w := range tWant {
		got := figures(t, out.String(), name)
		if got[0] != w[0] || (w[1] >= 0 && got[1] != w[1]) {
			t.Errorf("%s: got %v, want %v (-1: any)", name, got, w)
		}
	}
	if got := figures(t, out.String(), "transfer stale accepted"); got[1] < 2*tPaused {
		t.Errorf("transfer stale accepted without checks: got %d, want at least %d", got[1], 2*tPaused)
	}
	// Without checks, each stale write wipes out at least the takeover deposit before it.
	if lost := figures(t, out.String(), "lost updates"); lost[0] != 0 || lost[1] < paused {
		t.Errorf("lost updates: got %v, want 0 with checks and at least %d without", lost, paused)
	}
}

// figures reads one row of the report: the figure with token checks and the one without.
func figures(t *testing.T, report, name string) [2]int64 {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `\s+(-?\d+)\s+(-?\d+)$`).FindStringSubmatch(report)
	if m == nil {
		t.Fatalf("no row %q in the report", name)
	}
	a, _ := strconv.ParseInt(m[1], 10, 64)
	b, _ := strconv.ParseInt(m[2], 10, 64)
	return [2]int64{a, b}
}

// TestLeavesNothingBehind runs the demo on a database of its own of the real Redis named by
// FENCING_REDIS_ADDR and checks that no key is left: no lock, no fence counter, no Asynq
// queue or statistics.
func TestLeavesNothingBehind(t *testing.T) {
	_, addr := dedicated(t, 11)
	cfg := config{
		redisAddr: addr,
		accounts:  2,
		requests:  20,
		jobs:      10,
		pauses:    1,
	}
	var out bytes.Buffer
	if code, err := run(t.Context(), cfg, &out, io.Discard); err != nil || code != 0 {
		t.Fatalf("got exit status %d, error %v; report:\n%s", code, err, &out)
	}
}
