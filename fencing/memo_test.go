package fencing_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/internal/testkit/redistest"
)

// TestUnlessMemo checks that an acquisition with UnlessMemo takes nothing, issues no token and
// returns a *MemoError with the memo's value while the memo exists, and acquires as usual
// without it; for TryAcquire, Acquire and Do.
func TestUnlessMemo(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	l := newLocker(t, r)
	ctx := t.Context()
	unless := fencing.UnlessMemo("done")

	lock, err := l.TryAcquire(ctx, "job", unless)
	if err != nil {
		t.Fatalf("without the memo: %v", err)
	}
	if err := lock.ReleaseWith(ctx, fencing.Memo{Name: "done", Value: "result-1", TTL: time.Hour}); err != nil {
		t.Fatalf("ReleaseWith: %v", err)
	}
	calls := map[string]func() error{
		"TryAcquire": func() error { _, err := l.TryAcquire(ctx, "job", unless); return err },
		"Acquire":    func() error { _, err := l.Acquire(ctx, "job", unless); return err },
		"Do": func() error {
			return l.Do(ctx, "job", func(context.Context) error { t.Error("Do ran its function beside the memo"); return nil }, unless)
		},
	}
	for name, call := range calls {
		err := call()
		var memo *fencing.MemoError
		if !errors.As(err, &memo) || !errors.Is(err, fencing.ErrNotAcquired) || memo.Value != "result-1" || memo.Name != "done" || memo.Resource != "job" {
			t.Fatalf("%s with the memo: got %v, want a *MemoError holding result-1", name, err)
		}
	}
	if n := r.Client.Exists(ctx, r.Prefix+"{job}:lock").Val(); n != 0 {
		t.Fatal("a call that found the memo left a lock")
	}
	if v := r.Client.Get(ctx, r.Prefix+"{job}:fence").Val(); v != "1" {
		t.Fatalf("fence %q after calls that found the memo, want 1 (no token issued)", v)
	}
	if v, ok, err := l.ReadMemo(ctx, "job", "done"); err != nil || !ok || v != "result-1" {
		t.Fatalf("ReadMemo: got %q %v %v, want result-1", v, ok, err)
	}
	if _, ok, err := l.ReadMemo(ctx, "other", "done"); err != nil || ok {
		t.Fatalf("ReadMemo of a resource without: got %v %v, want false", ok, err)
	}
}

// TestReleaseWith checks that ReleaseWith writes the memo in the release's one round trip only
// while the acquisition holds the lock, with the counter's expiry when asked (a Locker with the
// time floor), and that a lost lock writes nothing and answers ErrNotHeld.
func TestReleaseWith(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	var trips redistest.Trips
	c := r.NewClient(t)
	c.AddHook(&trips)
	l := fencing.New(c, fencing.WithPrefix(r.Prefix), fencing.WithServerTimeFloor())
	t.Cleanup(func() { _ = l.Close() })
	ctx := t.Context()
	memo := fencing.Memo{Name: "done", Value: "v", TTL: time.Hour, ExpireCounter: true}

	if err := mustAcquire(t, l, "warm").Release(ctx); err != nil { // the scripts loaded
		t.Fatal(err)
	}
	lock := mustAcquire(t, l, "res")
	before := trips.Load()
	if err := lock.ReleaseWith(ctx, memo); err != nil {
		t.Fatal(err)
	}
	if n := trips.Load() - before; n != 1 {
		t.Fatalf("the release and its memo took %d round trips, want 1", n)
	}
	if v := r.Client.Get(ctx, r.Prefix+"{res}:done").Val(); v != "v" {
		t.Fatalf("memo %q, want v", v)
	}
	if ttl := r.Client.PTTL(ctx, r.Prefix+"{res}:done").Val(); ttl <= 59*time.Minute || ttl > time.Hour {
		t.Fatalf("memo TTL %v, want an hour", ttl)
	}
	if ttl := r.Client.PTTL(ctx, r.Prefix+"{res}:fence").Val(); ttl <= 59*time.Minute || ttl > time.Hour {
		t.Fatalf("counter TTL %v, want an hour", ttl)
	}
	if n := r.Client.Exists(ctx, r.Prefix+"{res}:lock").Val(); n != 0 {
		t.Fatal("the lock was not released")
	}

	// A lock lost before its release writes nothing.
	lost := mustAcquire(t, l, "lost")
	if err := r.Client.Del(ctx, r.Prefix+"{lost}:lock").Err(); err != nil { // the lease ran out
		t.Fatal(err)
	}
	if err := lost.ReleaseWith(ctx, memo); !errors.Is(err, fencing.ErrNotHeld) {
		t.Fatalf("a lost lock: got %v, want ErrNotHeld", err)
	}
	if n := r.Client.Exists(ctx, r.Prefix+"{lost}:done").Val(); n != 0 {
		t.Fatal("a release that lost its lock wrote its memo")
	}
}

// TestReleaseWithHandsOver checks a memo written by a release that hands the lock to a waiter
// queued behind it, and by the release of a shared holder and of one of a limit's: the memo is
// written and the waiter granted with the next token, in the release's one step.
func TestReleaseWithHandsOver(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	l, waiter := newLocker(t, r), newLocker(t, r)
	ctx := t.Context()
	memo := fencing.Memo{Name: "done", Value: "v", TTL: time.Hour}
	for _, tc := range []struct {
		name string
		opts []fencing.CallOption
	}{
		{"exclusive", nil},
		{"shared", []fencing.CallOption{fencing.Shared()}},
		{"limit", []fencing.CallOption{fencing.WithLimit(1 + 1)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := "hand-" + tc.name
			lock := mustAcquire(t, l, res, tc.opts...)
			var others []*fencing.Lock
			if tc.name == "limit" {
				others = append(others, mustAcquire(t, l, res, tc.opts...))
			}
			// An exclusive waiter behind an exclusive or shared holder; one of the limit behind
			// its full slots.
			wopts := []fencing.CallOption{}
			if tc.name == "limit" {
				wopts = tc.opts
			}
			granted := acquireAsync(ctx, waiter, res, wopts...)
			waitFor(t, 5*time.Second, "the waiter in the queue", func() bool { return queueLen(r, res) == 1 })
			if err := lock.ReleaseWith(ctx, memo); err != nil {
				t.Fatal(err)
			}
			a := <-granted
			if a.err != nil || a.lock.Token() <= lock.Token() {
				t.Fatalf("the waiter: %v, token %d after %d", a.err, a.lock.Token(), lock.Token())
			}
			if v := r.Client.Get(ctx, r.Prefix+"{"+res+"}:done").Val(); v != "v" {
				t.Fatalf("memo %q, want v", v)
			}
			for _, k := range append(others, a.lock) {
				if err := k.Release(ctx); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// TestLeaveMemo checks the memo of Do's work: written by Do's release in the same step, not
// by a nested Do, and not at all when the lock was lost (Do then matches ErrNotHeld).
func TestLeaveMemo(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	l := newLocker(t, r)
	ctx := t.Context()
	err := l.Do(ctx, "res", func(ctx context.Context) error {
		if err := l.Do(ctx, "inner", func(ctx context.Context) error { return nil }); err != nil {
			return err
		}
		return fencing.LeaveMemo(ctx, fencing.Memo{Name: "done", Value: "ran", TTL: time.Hour})
	})
	if err != nil {
		t.Fatal(err)
	}
	if v := r.Client.Get(ctx, r.Prefix+"{res}:done").Val(); v != "ran" {
		t.Fatalf("memo %q, want ran", v)
	}
	if n := r.Client.Exists(ctx, r.Prefix+"{inner}:done").Val(); n != 0 {
		t.Fatal("the nested Do wrote the memo")
	}

	err = l.Do(ctx, "lost", func(ctx context.Context) error {
		if err := fencing.LeaveMemo(ctx, fencing.Memo{Name: "done", Value: "late", TTL: time.Hour}); err != nil {
			return err
		}
		return r.Client.Del(ctx, r.Prefix+"{lost}:lock").Err() // the lease ran out
	})
	if !errors.Is(err, fencing.ErrNotHeld) {
		t.Fatalf("a lost lock: got %v, want ErrNotHeld", err)
	}
	if n := r.Client.Exists(ctx, r.Prefix+"{lost}:done").Val(); n != 0 {
		t.Fatal("a Do that lost its lock wrote its memo")
	}
}

// TestMemoBadInput checks that invalid memos and names are refused with ErrInvalid before
// anything is sent, and that the lock is still held after a refused ReleaseWith.
func TestMemoBadInput(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	l := newLocker(t, r)
	ctx := t.Context()
	lock := mustAcquire(t, l, "res")
	for _, m := range []fencing.Memo{
		{Name: "", Value: "v", TTL: time.Hour},
		{Name: "lock", Value: "v", TTL: time.Hour},
		{Name: "a:b", Value: "v", TTL: time.Hour},
		{Name: strings.Repeat("x", 65), Value: "v", TTL: time.Hour},
		{Name: "done", Value: "v", TTL: 0},
		{Name: "done", Value: "v", TTL: 366*24*time.Hour + time.Hour},
		{Name: "done", Value: "v", TTL: time.Hour, ExpireCounter: true}, // no time floor
	} {
		if err := lock.ReleaseWith(ctx, m); !errors.Is(err, fencing.ErrInvalid) {
			t.Errorf("ReleaseWith(%+v): got %v, want ErrInvalid", m, err)
		}
	}
	if _, err := lock.TTL(ctx); err != nil {
		t.Fatalf("the lock after refused ReleaseWith calls: %v, want still held", err)
	}
	if _, err := l.TryAcquire(ctx, "other", fencing.UnlessMemo("queue")); !errors.Is(err, fencing.ErrInvalid) {
		t.Errorf("UnlessMemo(queue): got %v, want ErrInvalid", err)
	}
	if _, _, err := l.ReadMemo(ctx, "res", "b64"); !errors.Is(err, fencing.ErrInvalid) {
		t.Errorf("ReadMemo(b64): got %v, want ErrInvalid", err)
	}
	if err := fencing.LeaveMemo(ctx, fencing.Memo{Name: "done", Value: "v", TTL: time.Hour}); !errors.Is(err, fencing.ErrInvalid) {
		t.Errorf("LeaveMemo outside Do: got %v, want ErrInvalid", err)
	}
	if err := lock.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
