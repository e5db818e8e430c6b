package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fencekit/fencekit/internal/testkit/redisproc"
	"github.com/fencekit/fencekit/internal/wire"
)

// TestLargeScan fills a private redis-server with 100,000 keys of the layout (2,000 held
// locks and 98,000 fence counters, a tenth of them with an expiry) and runs locks and stats
// over them with the progress interval shortened to a nanosecond: both finish, find every
// key and report progress on stderr.
func TestLargeScan(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("-short")
	}
	redisproc.Require(t)
	srv := redisproc.Start(t)
	tg := target{url: "redis://" + srv.Addr(), prefix: "fencing:"}
	client := srv.Client(t)
	ctx := context.Background()
	const locks, counters = 2_000, 98_000
	for start := 0; start < locks+counters; start += 10_000 {
		pipe := client.Pipeline()
		for i := start; i < start+10_000; i++ {
			k := wire.For(tg.prefix, fmt.Sprintf("res-%d", i))
			switch {
			case i < locks:
				pipe.Set(ctx, k.Lock, wire.Value(ownerID, int64(i+1)), time.Hour)
			case i%10 == 0:
				pipe.Set(ctx, k.Fence, i, time.Hour)
			default:
				pipe.Set(ctx, k.Fence, i, 0)
			}
		}
		if _, err := pipe.Exec(ctx); err != nil {
			t.Fatal(err)
		}
	}

	r := runCLI(t, nil, time.Nanosecond, tg.args("locks", "--json")...)
	if r.code != exitOK {
		t.Fatalf("locks: exit %d, stderr %q", r.code, r.stderr)
	}
	var got locksOutput
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Locks) != locks {
		t.Errorf("locks: got %d, want %d", len(got.Locks), locks)
	}
	checkProgress(t, "locks", r.stderr, fmt.Sprintf("%d lock keys found", locks))

	r = runCLI(t, nil, time.Nanosecond, tg.args("stats", "--json")...)
	if r.code != exitOK {
		t.Fatalf("stats: exit %d, stderr %q", r.code, r.stderr)
	}
	var stats statsOutput
	if err := json.Unmarshal([]byte(r.stdout), &stats); err != nil {
		t.Fatal(err)
	}
	lk, fk := stats.Kinds[0], stats.Kinds[1]
	if lk.Keys != locks || lk.WithTTL != locks || fk.Keys != counters || fk.WithTTL != counters/10 || fk.Sampled != 1000 || fk.EstimatedBytes < 50*counters {
		t.Errorf("stats: locks %+v, counters %+v", lk, fk)
	}
	checkProgress(t, "stats", r.stderr, fmt.Sprintf("%d keys found", locks+counters))
}

func checkProgress(t *testing.T, cmd, stderr, done string) {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(stderr), "\n")
	if len(lines) < 3 || !strings.HasPrefix(lines[0], "fencekit: scanning: ") || !strings.Contains(lines[0], "over 100000 keys") {
		t.Errorf("%s: stderr has no progress lines:\n%s", cmd, stderr)
		return
	}
	if last := lines[len(lines)-1]; !strings.HasPrefix(last, "fencekit: scan done: ") || !strings.Contains(last, done) {
		t.Errorf("%s: last line %q, want the scan's end with %q", cmd, last, done)
	}
}
