package fencing_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/internal/redistest"
	"github.com/fencekit/fencekit/internal/seam"
)

// TestSeamGuard checks the guard of a seam.Call: while the guard key exists, Do takes nothing,
// does not call its function, and returns an error matching seam.ErrGuarded and
// ErrNotAcquired with the key's value in Guarded; without it, Do runs and the key names are set.
func TestSeamGuard(t *testing.T) {
	r := redistest.New(t)
	l := newLocker(t, r)
	ctx := t.Context()

	call := &seam.Call{Guard: "idem"}
	ran := false
	err := l.Do(seam.WithCall(ctx, call), "res", func(context.Context) error { ran = true; return nil })
	if err != nil || !ran {
		t.Fatalf("without the guard key: got %v (ran %v), want nil and the function run", err, ran)
	}
	if want := r.Prefix + "{res}:idem"; call.GuardKey != want || call.LockKey != r.Prefix+"{res}:lock" || call.FenceKey != r.Prefix+"{res}:fence" {
		t.Fatalf("key names: got %q %q %q, want %q and the lock and fence keys", call.LockKey, call.FenceKey, call.GuardKey, want)
	}
	if err := r.Client.Set(ctx, call.GuardKey, "stored", 0).Err(); err != nil {
		t.Fatal(err)
	}
	call = &seam.Call{Guard: "idem"}
	ran = false
	err = l.Do(seam.WithCall(ctx, call), "res", func(context.Context) error { ran = true; return nil })
	if !errors.Is(err, seam.ErrGuarded) || !errors.Is(err, fencing.ErrNotAcquired) || ran || call.Guarded != "stored" {
		t.Fatalf("with the guard key: got %v (ran %v, guarded %q), want ErrGuarded, not run, %q", err, ran, call.Guarded, "stored")
	}
	if n := r.Client.Exists(ctx, r.Prefix+"{res}:lock").Val(); n != 0 {
		t.Fatal("a guarded call left a lock")
	}
	if v := r.Client.Get(ctx, r.Prefix+"{res}:fence").Val(); v != "1" {
		t.Fatalf("fence %q after a guarded call, want 1 (no token issued)", v)
	}
}

// TestSeamCommit checks the commit of a seam.Call: the release script writes the guard key and
// gives the counter its expiry in the same round trip as the release, only while the call
// holds the lock, and reports it in Committed; a Do nested in the work sees no Call.
func TestSeamCommit(t *testing.T) {
	r := redistest.New(t)
	var count redistest.Trips
	c := r.NewClient(t)
	c.AddHook(&count)
	l := fencing.New(c, fencing.WithPrefix(r.Prefix))
	t.Cleanup(func() { _ = l.Close() })
	ctx := t.Context()

	call := &seam.Call{Guard: "idem"}
	var before int64
	err := l.Do(seam.WithCall(ctx, call), "res", func(ctx context.Context) error {
		// A nested Do is a plain one: the guard is not checked, nothing is committed.
		if err := l.Do(ctx, "inner", func(context.Context) error { return nil }); err != nil {
			return err
		}
		call.Commit, call.CommitTTL, call.CounterTTL = "committed", time.Hour, 2*time.Hour
		before = count.Load()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := count.Load() - before; n != 1 {
		t.Fatalf("the release and its commit took %d round trips, want 1", n)
	}
	if !call.Committed {
		t.Fatal("Committed is false after a release that held the lock")
	}
	if v := r.Client.Get(ctx, call.GuardKey).Val(); v != "committed" {
		t.Fatalf("guard key %q, want committed", v)
	}
	if ttl := r.Client.PTTL(ctx, call.GuardKey).Val(); ttl <= 59*time.Minute || ttl > time.Hour {
		t.Fatalf("guard key TTL %v, want an hour", ttl)
	}
	if ttl := r.Client.PTTL(ctx, call.FenceKey).Val(); ttl <= 119*time.Minute || ttl > 2*time.Hour {
		t.Fatalf("counter TTL %v, want two hours", ttl)
	}
	if n := r.Client.Exists(ctx, call.LockKey, r.Prefix+"{inner}:idem").Val(); n != 0 {
		t.Fatal("the lock was not released, or the nested Do committed")
	}

	// A call that lost its lock commits nothing.
	call = &seam.Call{Guard: "other"}
	err = l.Do(seam.WithCall(ctx, call), "lost", func(ctx context.Context) error {
		call.Commit, call.CommitTTL = "late", time.Hour
		return r.Client.Del(ctx, call.LockKey).Err() // the lease ran out
	})
	if !errors.Is(err, fencing.ErrNotHeld) || call.Committed {
		t.Fatalf("lost lock: got %v, committed %v; want ErrNotHeld and nothing committed", err, call.Committed)
	}
	if n := r.Client.Exists(ctx, call.GuardKey).Val(); n != 0 {
		t.Fatal("a call that lost its lock wrote its commit")
	}
}

// TestSeamCommitHandsOver checks the commit of a release that hands the lock to a waiter queued
// behind it (the release script's path past the exclusive fast one): the commit is written, the
// counter's expiry set, and the waiter granted with the next token, in the release's one step.
func TestSeamCommitHandsOver(t *testing.T) {
	r := redistest.New(t)
	l := fencing.New(r.Client, fencing.WithPrefix(r.Prefix))
	waiter := fencing.New(r.Client, fencing.WithPrefix(r.Prefix))
	t.Cleanup(func() { _ = l.Close(); _ = waiter.Close() })
	ctx := t.Context()

	call := &seam.Call{Guard: "idem"}
	var granted <-chan acquired
	err := l.Do(seam.WithCall(ctx, call), "res", func(ctx context.Context) error {
		granted = acquireAsync(t.Context(), waiter, "res")
		waitFor(t, 5*time.Second, "the waiter in the queue", func() bool { return queueLen(r, "res") == 1 })
		call.Commit, call.CommitTTL, call.CounterTTL = "committed", time.Hour, 2*time.Hour
		return nil
	})
	if err != nil || !call.Committed {
		t.Fatalf("Do: %v, committed %v; want nil and the commit written", err, call.Committed)
	}
	a := <-granted
	if a.err != nil {
		t.Fatal(a.err)
	}
	t.Cleanup(func() { _ = a.lock.Release(context.Background()) })
	if a.lock.Token() != 2 {
		t.Fatalf("the waiter's token %d, want 2", a.lock.Token())
	}
	if v := r.Client.Get(ctx, call.GuardKey).Val(); v != "committed" {
		t.Fatalf("guard key %q, want committed", v)
	}
	if ttl := r.Client.PTTL(ctx, call.FenceKey).Val(); ttl <= 119*time.Minute || ttl > 2*time.Hour {
		t.Fatalf("counter TTL %v, want two hours", ttl)
	}
}
