package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/fencekit/fencekit/fencing"
)

// TestLimitedResource takes 3 slots of a resource of limit 4 with the library and checks
// that locks and show list every holder and the limit.
func TestLimitedResource(t *testing.T) {
	forTargets(t, func(t *testing.T, tg target) {
		l := fencing.New(tg.client, fencing.WithPrefix(tg.prefix), fencing.WithLimit(4))
		defer l.Close()
		ctx := t.Context()
		for range 3 {
			lock, err := l.TryAcquire(ctx, "tenant-7", fencing.WithTTL(time.Hour))
			if err != nil {
				t.Fatal(err)
			}
			defer lock.Release(ctx)
		}
		check := func(what string, limit int, holders []holderInfo) {
			t.Helper()
			if limit != 4 || len(holders) != 3 {
				t.Fatalf("%s: got limit %d and %d holders, want 4 and 3", what, limit, len(holders))
			}
			for i, h := range holders {
				if h.Token != int64(i+1) || h.TTLMs <= 0 || h.TTLMs > time.Hour.Milliseconds() || len(h.Owner) != 22 {
					t.Errorf("%s: holder %d: %+v", what, i, h)
				}
			}
		}

		r := tg.run(t, exitOK, "locks", "--json", "--match", "tenant-*")
		var locks locksOutput
		if err := json.Unmarshal([]byte(r.stdout), &locks); err != nil {
			t.Fatalf("%v in\n%s", err, r.stdout)
		}
		if len(locks.Locks) != 1 || locks.Locks[0].Token != 3 {
			t.Fatalf("locks --json: got %+v, want tenant-7 with token 3", locks.Locks)
		}
		check("locks --json", locks.Locks[0].Limit, locks.Locks[0].Holders)
		r = tg.run(t, exitOK, "locks", "--match", "tenant-*")
		if n := strings.Count(r.stdout, "tenant-7 (3/4)"); n != 3 {
			t.Errorf("locks: %d rows of tenant-7 (3/4), want 3:\n%s", n, r.stdout)
		}

		r = tg.run(t, exitOK, "show", "--json", "tenant-7")
		var show showOutput
		if err := json.Unmarshal([]byte(r.stdout), &show); err != nil {
			t.Fatalf("%v in\n%s", err, r.stdout)
		}
		if show.Lock == nil {
			t.Fatalf("show --json: no lock in\n%s", r.stdout)
		}
		check("show --json", show.Lock.Limit, show.Lock.Holders)
		r = tg.run(t, exitOK, "show", "tenant-7")
		if !strings.Contains(r.stdout, "3 of limit 4 held") || strings.Count(r.stdout, "holder:") != 3 {
			t.Errorf("show: got\n%s", r.stdout)
		}
	})
}
