package fencing_test

import (
	"context"
	"errors"

	"testing"

	"github.com/redis/go-redis/v9"

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

// TestSeamBeforeRelease checks that the commands of BeforeRelease go with Do's release in one
// round trip, before the release script, and that a Do nested in the work sees no Call.
func TestSeamBeforeRelease(t *testing.T) {
	r := redistest.New(t)
	var count redistest.Trips
	c := r.NewClient(t)
	c.AddHook(&count)
	l := fencing.New(c, fencing.WithPrefix(r.Prefix))
	t.Cleanup(func() { _ = l.Close() })
	ctx := t.Context()

	call := &seam.Call{Guard: "idem"}
	var set *redis.StatusCmd
	var before int64
	err := l.Do(seam.WithCall(ctx, call), "res", func(ctx context.Context) error {
		// A nested Do is a plain one: the guard is not checked, BeforeRelease not sent.
		if err := l.Do(ctx, "inner", func(context.Context) error { return nil }); err != nil {
			return err
		}
		call.BeforeRelease = func(p redis.Pipeliner) {
			set = p.Set(ctx, call.GuardKey, "committed", 0)
		}
		before = count.Load()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := count.Load() - before; n != 1 {
		t.Fatalf("the release and its commands took %d round trips, want 1", n)
	}
	if set == nil || set.Err() != nil {
		t.Fatalf("the command before the release: %v", set)
	}
	if v := r.Client.Get(ctx, call.GuardKey).Val(); v != "committed" {
		t.Fatalf("guard key %q, want committed", v)
	}
	if n := r.Client.Exists(ctx, call.LockKey).Val(); n != 0 {
		t.Fatal("the lock was not released")
	}
}
