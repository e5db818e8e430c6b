package main

import (
	"context"
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
	t.Parallel()
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
		if locks.Locks[0].Mode != modeLimit {
			t.Errorf("locks --json: mode %q, want %q", locks.Locks[0].Mode, modeLimit)
		}
		check("locks --json", locks.Locks[0].Limit, locks.Locks[0].Holders)
		r = tg.run(t, exitOK, "locks", "--match", "tenant-*")
		if n := strings.Count(r.stdout, "tenant-7 (3/4)  limit 4"); n != 3 {
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
		if show.Lock.Mode != modeLimit {
			t.Errorf("show --json: mode %q, want %q", show.Lock.Mode, modeLimit)
		}
		check("show --json", show.Lock.Limit, show.Lock.Holders)
		r = tg.run(t, exitOK, "show", "tenant-7")
		if !strings.Contains(r.stdout, "Lock:        limit 4, 3 held\n") || strings.Count(r.stdout, "holder:") != 3 {
			t.Errorf("show: got\n%s", r.stdout)
		}
	})
}

// TestReleaseLimited frees one slot of a resource of limit 3 with release --force: without
// --token it names the holders and frees nothing; with it, that holder's slot alone goes.
func TestReleaseLimited(t *testing.T) {
	t.Parallel()
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
	if !strings.Contains(r.stdout, "a limited resource (limit 3) with 2 holders, tokens 1, 2") {
		t.Errorf("release without --token: got\n%s", r.stdout)
	}
	tg.run(t, exitNotFound, "release", "--force", "--yes", "--token", "7", "tenant-9")
	r = tg.run(t, exitOK, "release", "--force", "--yes", "--token", "1", "--json", "tenant-9")
	var out releaseOutput
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
		t.Fatalf("%v in\n%s", err, r.stdout)
	}
	if !out.Released || out.Token != 1 || out.Mode != modeLimit {
		t.Errorf("release --token 1: got %+v", out)
	}
	if err := locks[0].Extend(ctx, time.Hour); !errors.Is(err, fencing.ErrNotHeld) {
		t.Errorf("the released holder's Extend: got %v, want ErrNotHeld", err)
	}
	if err := locks[0].Release(ctx); !errors.Is(err, fencing.ErrNotHeld) {
		t.Errorf("the released holder's Release: got %v, want ErrNotHeld", err)
	}
	if _, err := locks[1].TTL(ctx); err != nil {
		t.Errorf("the other holder lost its slot: %v", err)
	}
	r = tg.run(t, exitOK, "release", "--force", "--yes", "tenant-9") // the only holder left
	if !strings.Contains(r.stdout, "token 2") {
		t.Errorf("release of the last holder: got\n%s", r.stdout)
	}
	tg.run(t, exitNotFound, "show", "tenant-9") // the hash may outlive its last holder: free
	tg.run(t, exitNotFound, "release", "--force", "--yes", "tenant-9")
}

// TestSharedResource takes 3 shared holds of a resource with the library and queues an
// exclusive waiter whose counter expires (WithCounterExpiry) and, behind it, a shared one
// floored at the server clock (WithServerTimeFloor); it checks that locks and show give the
// mode, every holder, and each waiter's mode and rules as its queue element says them.
func TestSharedResource(t *testing.T) {
	t.Parallel()
	forTargets(t, func(t *testing.T, tg target) {
		ctx := t.Context()
		l := fencing.New(tg.client, fencing.WithPrefix(tg.prefix))
		defer l.Close()
		for range 3 {
			lock, err := l.TryAcquire(ctx, "report", fencing.Shared(), fencing.WithTTL(time.Hour))
			if err != nil {
				t.Fatal(err)
			}
			defer lock.Release(context.Background())
		}
		writer := fencing.New(tg.client, fencing.WithPrefix(tg.prefix), fencing.WithCounterExpiry(time.Hour))
		defer writer.Close()
		reader := fencing.New(tg.client, fencing.WithPrefix(tg.prefix), fencing.WithServerTimeFloor())
		defer reader.Close()
		wait(t, l, "writer", writer, "report", 1)
		wait(t, l, "reader", reader, "report", 2, fencing.Shared())

		check := func(what string, mode string, limit int, holders []holderInfo) {
			t.Helper()
			if mode != modeShared || limit != 0 || len(holders) != 3 {
				t.Fatalf("%s: got mode %q, limit %d, %d holders; want shared, 0, 3", what, mode, limit, len(holders))
			}
			for i, h := range holders {
				if h.Token != int64(i+1) || h.TTLMs <= 0 || h.TTLMs > time.Hour.Milliseconds() || len(h.Owner) != 22 {
					t.Errorf("%s: holder %d: %+v", what, i, h)
				}
			}
		}
		r := tg.run(t, exitOK, "locks", "--json", "--match", "report")
		var locks locksOutput
		if err := json.Unmarshal([]byte(r.stdout), &locks); err != nil {
			t.Fatalf("%v in\n%s", err, r.stdout)
		}
		if len(locks.Locks) != 1 || locks.Locks[0].Token != 3 || locks.Locks[0].Waiters != 2 || locks.Locks[0].Value != "" || locks.Locks[0].OldestWaitMs == nil {
			t.Fatalf("locks --json: got %+v, want report with token 3 and 2 waiters", locks.Locks)
		}
		check("locks --json", locks.Locks[0].Mode, locks.Locks[0].Limit, locks.Locks[0].Holders)
		r = tg.run(t, exitOK, "locks", "--match", "report")
		if n := strings.Count(r.stdout, "report    shared"); n != 3 {
			t.Errorf("locks: %d rows of report shared, want 3:\n%s", n, r.stdout)
		}

		r = tg.run(t, exitOK, "show", "--json", "report")
		var show showOutput
		if err := json.Unmarshal([]byte(r.stdout), &show); err != nil {
			t.Fatalf("%v in\n%s", err, r.stdout)
		}
		if show.Lock == nil {
			t.Fatalf("show --json: no lock in\n%s", r.stdout)
		}
		check("show --json", show.Lock.Mode, show.Lock.Limit, show.Lock.Holders)
		if q := show.Queue.Entries; len(q) != 2 {
			t.Fatalf("show --json: queue %+v, want 2 entries", show.Queue)
		}
		w, rd := show.Queue.Entries[0], show.Queue.Entries[1]
		if !w.Live || w.Mode != modeExclusive || !w.Floor || w.CounterExpiryMs == nil || *w.CounterExpiryMs != time.Hour.Milliseconds() || w.WaitingMs == nil {
			t.Errorf("show --json: the writer's entry: %+v", w)
		}
		if !rd.Live || rd.Mode != modeShared || !rd.Floor || rd.CounterExpiryMs != nil || rd.WaitingMs == nil {
			t.Errorf("show --json: the reader's entry: %+v", rd)
		}
		r = tg.run(t, exitOK, "show", "report")
		if !strings.Contains(r.stdout, "Lock:        shared by 3 holders\n") || strings.Count(r.stdout, "holder:") != 3 ||
			!strings.Contains(r.stdout, " exclusive  yes   yes, expiry 1h ") || !strings.Contains(r.stdout, " shared     yes   yes ") {
			t.Errorf("show: got\n%s", r.stdout)
		}
	})
}

// wait starts l's Acquire of resource in a goroutine that ends with the test, expecting it
// to wait until then, and returns once inspector sees n waiters queued for resource.
func wait(t *testing.T, inspector *fencing.Locker, who string, l *fencing.Locker, resource string, n int, opts ...fencing.CallOption) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if lock, err := l.Acquire(ctx, resource, opts...); err == nil {
			_ = lock.Release(context.Background())
			t.Errorf("%s: acquired a resource held by others", who)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	waitQueued(t, inspector, resource, n, done)
}

// waitQueued returns once inspector sees n waiters queued for resource. It fails t when
// done is closed first (the Acquire that was to queue returned) or after 10 s.
func waitQueued(t *testing.T, inspector *fencing.Locker, resource string, n int, done <-chan struct{}) {
	t.Helper()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	timeout := time.After(10 * time.Second)
	for {
		st, err := inspector.Inspect(context.Background(), resource)
		if err != nil {
			t.Fatal(err)
		}
		if len(st.Waiters) == n {
			return
		}
		select {
		case <-tick.C:
		case <-done:
			t.Fatalf("%s: Acquire returned before %d waiters queued", resource, n)
		case <-timeout:
			t.Fatalf("%s: %d waiters queued, want %d", resource, len(st.Waiters), n)
		}
	}
}

// TestReleaseShared frees shared holders with release --force: without --token it names
// the holders and frees nothing; with it, that holder alone goes; the last one goes with
// the key. --token on an exclusive lock releases it only if the token matches.
func TestReleaseShared(t *testing.T) {
	t.Parallel()
	tg := sharedTarget(t)
	l := fencing.New(tg.client, fencing.WithPrefix(tg.prefix))
	defer l.Close()
	ctx := t.Context()
	var locks []*fencing.Lock
	for range 2 {
		lock, err := l.TryAcquire(ctx, "report-9", fencing.Shared(), fencing.WithTTL(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		defer lock.Release(context.Background())
		locks = append(locks, lock)
	}
	r := tg.run(t, exitError, "release", "--force", "--yes", "report-9")
	if !strings.Contains(r.stdout, "a shared resource with 2 holders, tokens 1, 2; name one with --token") {
		t.Errorf("release without --token: got\n%s", r.stdout)
	}
	tg.run(t, exitNotFound, "release", "--force", "--yes", "--token", "7", "report-9")
	r = tg.run(t, exitOK, "release", "--force", "--yes", "--token", "1", "--json", "report-9")
	var out releaseOutput
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
		t.Fatalf("%v in\n%s", err, r.stdout)
	}
	if !out.Released || out.Token != 1 || out.Mode != modeShared || out.Owner == "" {
		t.Errorf("release --token 1: got %+v", out)
	}
	if err := locks[0].Extend(ctx, time.Hour); !errors.Is(err, fencing.ErrNotHeld) {
		t.Errorf("the released holder's Extend: got %v, want ErrNotHeld", err)
	}
	if err := locks[0].Release(ctx); !errors.Is(err, fencing.ErrNotHeld) {
		t.Errorf("the released holder's Release: got %v, want ErrNotHeld", err)
	}
	if _, err := locks[1].TTL(ctx); err != nil {
		t.Errorf("the other holder lost its hold: %v", err)
	}
	r = tg.run(t, exitOK, "show", "report-9")
	if !strings.Contains(r.stdout, "shared by 1 holder\n  holder:    token 2,") {
		t.Errorf("show after the release: got\n%s", r.stdout)
	}
	r = tg.run(t, exitOK, "release", "--force", "--yes", "report-9") // the only holder left
	if !strings.Contains(r.stdout, "Released a shared holder of \"report-9\": it had token 2") {
		t.Errorf("release of the last holder: got\n%s", r.stdout)
	}
	tg.run(t, exitNotFound, "show", "report-9") // the hash may outlive its last holder: free
	if _, err := l.TryAcquire(ctx, "report-9", fencing.WithTTL(time.Hour)); err != nil {
		t.Errorf("exclusive TryAcquire once no shared holder is left: %v", err)
	}

	// An exclusive lock, token 3: --token 2 leaves it alone.
	r = tg.run(t, exitNotFound, "release", "--force", "--yes", "--token", "2", "report-9")
	if !strings.Contains(r.stdout, "its exclusive lock has token 3") {
		t.Errorf("release --token 2 of token 3: got\n%s", r.stdout)
	}
	tg.run(t, exitOK, "release", "--force", "--yes", "--token", "3", "report-9")
}
