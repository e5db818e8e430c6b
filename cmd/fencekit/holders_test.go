package main

import (
	"encoding/json"
	"errors"
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

// TestReleaseLimited frees one slot of a resource of limit 3 with release --force: without
// --token it names the holders and frees nothing; with it, that holder's slot alone goes.
func TestReleaseLimited(t *testing.T) {
	tg := sharedTarget(t)
	l := fencing.New(tg.client, fencing.WithPrefix(tg.prefix), fencing.WithLimit(3))
	defer l.Close()
	ctx := t.Context()
	var locks []*fencing.Lock
	for range 2 {
		lock, err := l.TryAcquire(ctx, "tenant-9", fencing.WithTTL(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		defer lock.Release(ctx)
		locks = append(locks, lock)
	}
	r := tg.run(t, exitError, "release", "--force", "--yes", "tenant-9")
	if !strings.Contains(r.stdout, "tokens 1, 2") {
		t.Errorf("release without --token: got\n%s", r.stdout)
	}
	tg.run(t, exitNotFound, "release", "--force", "--yes", "--token", "7", "tenant-9")
	r = tg.run(t, exitOK, "release", "--force", "--yes", "--token", "1", "--json", "tenant-9")
	var out releaseOutput
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
		t.Fatalf("%v in\n%s", err, r.stdout)
	}
	if !out.Released || out.Token != 1 {
		t.Errorf("release --token 1: got %+v", out)
	}
	if err := locks[0].Extend(ctx, time.Hour); !errors.Is(err, fencing.ErrNotHeld) {
		t.Errorf("the released holder's Extend: got %v, want ErrNotHeld", err)
	}
	if _, err := locks[1].TTL(ctx); err != nil {
		t.Errorf("the other holder lost its slot: %v", err)
	}
	r = tg.run(t, exitOK, "release", "--force", "--yes", "tenant-9") // the only holder left
	if !strings.Contains(r.stdout, "token 2") {
		t.Errorf("release of the last holder: got\n%s", r.stdout)
	}
	if n := tg.client.Exists(ctx, keysFor(tg.prefix, "tenant-9").lock).Val(); n != 0 {
		t.Errorf("the lock key outlived its last holder")
	}
}
