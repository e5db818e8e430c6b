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

// TestInspect reads each kind of holder and waiter.
func TestInspect(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	l, other := newLocker(t, r), newLocker(t, r, fencing.WithCounterExpiry(time.Hour))
	ctx := t.Context()
	if st, err := l.Inspect(ctx, "res"); err != nil || len(st.Holders) != 0 || len(st.Waiters) != 0 || st.NextToken != 1 {
		t.Fatalf("a resource never used: got %+v, %v; want free with next token 1", st, err)
	}
	held := mustAcquire(t, l, "res", fencing.WithTTL(time.Minute))
	waiting := acquireAsync(ctx, other, "res", fencing.Shared())
	waitFor(t, 5*time.Second, "the shared waiter to queue", func() bool { return fencing.Waiters(other) == 1 })
	st, err := l.Inspect(ctx, "res")
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Holders) != 1 || st.Holders[0].Token != held.Token() || st.Limit != 1 || st.Shared ||
		st.Holders[0].TTL <= 0 || st.Holders[0].TTL > time.Minute || st.NextToken != held.Token()+1 {
		t.Errorf("exclusive holder: got %+v", st)
	}
	if len(st.Waiters) != 1 || !st.Waiters[0].Shared || st.Waiters[0].Limit != 0 || st.Waiters[0].CounterExpiry != time.Hour || !st.Waiters[0].Alive ||
		st.Waiters[0].Locker == "" {
		t.Errorf("shared waiter: got %+v", st.Waiters)
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	a := <-waiting
	if a.err != nil {
		t.Fatal(a.err)
	}
	defer a.lock.Release(context.Background())
	st, err = l.Inspect(ctx, "res")
	if err != nil || len(st.Holders) != 1 || !st.Shared || st.Limit != 0 || st.Holders[0].Token != a.lock.Token() ||
		len(st.Waiters) != 0 || st.CounterTTL <= 0 || st.CounterTTL > time.Hour {
		t.Errorf("shared holder: got %+v, %v", st, err)
	}
	if _, err := l.Inspect(ctx, ""); !errors.Is(err, fencing.ErrInvalid) {
		t.Errorf("Inspect of an empty name: got %v, want ErrInvalid", err)
	}
}

// TestForceRelease frees a resource from its holder of each kind: the next waiter holds it at
// once, with the next token, and the old holder's Release and Extend return ErrNotHeld.
func TestForceRelease(t *testing.T) {
	t.Parallel()
	for _, kind := range []struct {
		name       string
		opts, wait []fencing.CallOption // the holder's and the waiter's
		full       int                  // holders that fill it
	}{
		{"exclusive", nil, nil, 1},
		{"shared", []fencing.CallOption{fencing.Shared()}, nil, 1},
		{"limit 2", []fencing.CallOption{fencing.WithLimit(2)}, []fencing.CallOption{fencing.WithLimit(2)}, 2},
	} {
		t.Run(kind.name, func(t *testing.T) {
			r := redistest.New(t)
			ops, holders, waiters := newLocker(t, r), newLocker(t, r), newLocker(t, r, slowBackoff)
			ctx := t.Context()
			held := mustAcquire(t, holders, "res", kind.opts...)
			for range kind.full - 1 {
				defer mustAcquire(t, holders, "res", kind.opts...).Release(context.Background())
			}
			waiting := acquireAsync(ctx, waiters, "res", kind.wait...)
			// Queued in Redis (its join answered), not only in its Locker's room.
			waitFor(t, 10*time.Second, "the waiter to queue", func() bool { return fencing.Queued(waiters) == 1 })

			if err := ops.ForceRelease(ctx, "res", held.Token()+100); !errors.Is(err, fencing.ErrNotHeld) {
				t.Errorf("ForceRelease with a token nobody holds: got %v, want ErrNotHeld", err)
			}
			if err := ops.ForceRelease(ctx, "res", held.Token()); err != nil {
				t.Fatal(err)
			}
			// The grant is in Redis when ForceRelease returns: the waiter holds it.
			st, err := ops.Inspect(ctx, "res")
			next := held.Token() + int64(kind.full)
			if err != nil || len(st.Holders) != kind.full || st.Holders[kind.full-1].Token != next || len(st.Waiters) != 0 {
				t.Fatalf("after ForceRelease: got %+v, %v; want the waiter holding token %d", st, err, next)
			}
			a := <-waiting
			if a.err != nil || a.lock.Token() != next {
				t.Fatalf("the waiter: got %v, %v; want token %d", a.lock, a.err, next)
			}
			defer a.lock.Release(context.Background())
			if err := held.Extend(ctx, time.Minute); !errors.Is(err, fencing.ErrNotHeld) {
				t.Errorf("the old holder's Extend: got %v, want ErrNotHeld", err)
			}
			if err := held.Release(ctx); !errors.Is(err, fencing.ErrNotHeld) {
				t.Errorf("the old holder's Release: got %v, want ErrNotHeld", err)
			}
			if err := ops.ForceRelease(ctx, "res", held.Token()); !errors.Is(err, fencing.ErrNotHeld) {
				t.Errorf("ForceRelease again: got %v, want ErrNotHeld", err)
			}
		})
	}
	t.Run("bad input", func(t *testing.T) {
		r := redistest.New(t)
		l := newLocker(t, r)
		for _, name := range []string{"", strings.Repeat("x", fencing.MaxResourceLen+1)} {
			if err := l.ForceRelease(t.Context(), name, 1); !errors.Is(err, fencing.ErrInvalid) {
				t.Errorf("ForceRelease(%.10q): got %v, want ErrInvalid", name, err)
			}
		}
		if keys := r.Client.Keys(context.Background(), r.Prefix+"*").Val(); len(keys) != 0 {
			t.Errorf("bad input wrote %v", keys)
		}
	})
}
