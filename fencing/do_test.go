package fencing_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/internal/testkit/redistest"
)

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func TestDoTokenInContextAndRelease(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	l := newLocker(t, r)
	ctx := t.Context()
	wantErr := errors.New("work failed")
	var seen int64
	err := l.Do(ctx, "res", func(ctx context.Context) error {
		tok, ok := fencing.TokenFromContext(ctx)
		if !ok {
			t.Error("no token in fn's context")
		}
		seen = tok
		return wantErr
	})
	if !errors.Is(err, wantErr) || errors.Is(err, fencing.ErrNotHeld) {
		t.Fatalf("Do: got %v, want fn's error alone", err)
	}
	if seen != 1 {
		t.Fatalf("got token %d in context, want 1", seen)
	}
	if n := r.Client.Exists(ctx, r.Prefix+"{res}:lock").Val(); n != 0 {
		t.Fatal("lock still held after Do returned")
	}
	if _, ok := fencing.TokenFromContext(ctx); ok {
		t.Fatal("caller's context carries a token")
	}
}

func TestDoReleasesWhenCallerCancels(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	l := newLocker(t, r)
	ctx, cancel := context.WithCancel(t.Context())
	err := l.Do(ctx, "res", func(ctx context.Context) error {
		cancel()
		<-ctx.Done()
		return ctx.Err()
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
	if n := r.Client.Exists(context.Background(), r.Prefix+"{res}:lock").Val(); n != 0 {
		t.Fatal("a cancelled caller left the lock held")
	}
}

func TestDoReleasesOnPanic(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	l := newLocker(t, r)
	func() {
		defer func() {
			if p := recover(); p != "boom" {
				t.Fatalf("recovered %v, want the panic to pass through", p)
			}
		}()
		_ = l.Do(t.Context(), "res", func(context.Context) error { panic("boom") })
	}()
	if n := r.Client.Exists(t.Context(), r.Prefix+"{res}:lock").Val(); n != 0 {
		t.Fatal("lock still held after fn panicked")
	}
}

func TestDoRenewsPastTTL(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	// The lease the process keeps is measured on its own clock: a TTL that a loaded machine
	// cannot stall a renewal past (renewals go every third of it).
	const ttl = 3 * time.Second
	l := newLocker(t, r, fencing.WithTTL(ttl))
	lockKey := r.Prefix + "{res}:lock"
	err := l.Do(t.Context(), "res", func(ctx context.Context) error {
		// Let five thirds of the TTL pass, waiting after each step until a renewal has
		// pushed the TTL back up: without renewals the lock would be gone after three.
		for range 5 {
			r.Advance(ttl / 3)
			waitFor(t, time.Minute, "a renewal", func() bool {
				return r.Client.PTTL(context.Background(), lockKey).Val() > ttl*5/6
			})
			if ctx.Err() != nil {
				t.Fatalf("work cancelled while renewals succeed: %v", context.Cause(ctx))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("Do: %v", err)
	}
}

func TestDoLossCancelsWork(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	const ttl = 3 * time.Second // the first renewal, a third in, finds the loss
	l := newLocker(t, r, fencing.WithTTL(ttl))
	var cause error
	var took time.Duration
	err := l.Do(t.Context(), "res", func(ctx context.Context) error {
		// Another process takes over: the lock value changes under us.
		r.Client.Set(context.Background(), r.Prefix+"{res}:lock", "someone-else:99", time.Minute)
		begin := time.Now()
		select {
		case <-ctx.Done():
		case <-time.After(5 * time.Second):
			t.Fatal("work not cancelled after the lock was taken")
		}
		took = time.Since(begin)
		cause = context.Cause(ctx)
		return ctx.Err()
	})
	if !errors.Is(cause, fencing.ErrNotHeld) {
		t.Fatalf("cause: got %v, want ErrNotHeld", cause)
	}
	if !errors.Is(err, fencing.ErrNotHeld) || !errors.Is(err, context.Canceled) {
		t.Fatalf("Do: got %v, want ErrNotHeld joined with fn's error", err)
	}
	if took > ttl {
		t.Fatalf("work cancelled %v after the loss, want within the TTL (%v)", took, ttl)
	}
	if v := r.Client.Get(context.Background(), r.Prefix+"{res}:lock").Val(); v != "someone-else:99" {
		t.Fatalf("Do's release touched the new holder's lock: %q", v)
	}
}

func TestDoRedisDownCancelsAtValidity(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	if r.Mini == nil {
		t.Skip("needs miniredis SetError; the real-Redis version stops a redis-server process (internal/testkit/redisproc tests)")
	}
	const ttl = 300 * time.Millisecond
	l := newLocker(t, r, fencing.WithTTL(ttl))
	var cause error
	var begin, until, ended time.Time
	err := l.Do(t.Context(), "res", func(ctx context.Context) error {
		begin = time.Now()
		r.Mini.SetError("LOADING Redis is loading the dataset in memory")
		defer r.Mini.SetError("")
		select {
		case <-ctx.Done():
		case <-time.After(time.Minute):
			t.Fatal("work not cancelled while Redis fails")
		}
		ended, cause = time.Now(), context.Cause(ctx)
		until, _ = fencing.ValidUntilFromContext(ctx)
		return nil
	})
	if !errors.Is(cause, fencing.ErrNotHeld) || !errors.Is(err, fencing.ErrNotHeld) {
		t.Fatalf("got cause %v and error %v, want ErrNotHeld", cause, err)
	}
	// Renewals kept failing: the lease was not extended past the one held when Redis began to
	// fail, and the work was stopped at its end (how soon after is the scheduler's business).
	if until.IsZero() || until.After(begin.Add(ttl)) || ended.Before(until) {
		t.Fatalf("lease valid until %v (Redis failed at %v, lease %v), work cancelled at %v; want the lease not extended and the work stopped at its end",
			until.Format(time.StampMicro), begin.Format(time.StampMicro), ttl, ended.Format(time.StampMicro))
	}
}

// TestDoContention runs many goroutines through Do on one resource with a fenced store: no
// two sections overlap, no stale write is accepted, tokens strictly increase.
func TestDoContention(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	r.RealTime(t) // see docs/testing.md
	l := newLocker(t, r)
	n := 200
	if r.Mini != nil {
		n = 50 // miniredis, inside a -race test process: see docs/testing.md
	}
	var store fencedStore
	var mu sync.Mutex
	var tokens []int64
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			err := l.Do(t.Context(), "res", func(ctx context.Context) error {
				store.enter()
				defer store.leave()
				tok, _ := fencing.TokenFromContext(ctx)
				mu.Lock()
				tokens = append(tokens, tok)
				mu.Unlock()
				if !store.write(tok) {
					t.Errorf("fresh token %d rejected", tok)
				}
				return nil
			})
			if err != nil {
				t.Errorf("Do: %v", err)
			}
		})
	}
	wg.Wait()
	if store.writes != n || store.rejected != 0 || store.overlaps.Load() != 0 {
		t.Fatalf("writes %d rejected %d overlaps %d, want %d, 0, 0", store.writes, store.rejected, store.overlaps.Load(), n)
	}
	for i := 1; i < len(tokens); i++ {
		if tokens[i] <= tokens[i-1] {
			t.Fatalf("token %d after %d: tokens must strictly increase in acquisition order", tokens[i], tokens[i-1])
		}
	}
}

// TestPausedHolderRejected is Kleppmann's scenario: a holder pauses past its lease, another
// takes over and writes, the first wakes and writes late with its old token.
func TestPausedHolderRejected(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	const ttl = time.Second // a slow reply still comes back within it
	l := newLocker(t, r, fencing.WithTTL(ttl))
	var store fencedStore
	paused, err := l.TryAcquire(t.Context(), "res")
	if err != nil {
		t.Fatal(err)
	}
	r.Advance(2 * ttl) // the pause
	if err := l.Do(t.Context(), "res", func(ctx context.Context) error {
		tok, _ := fencing.TokenFromContext(ctx)
		store.write(tok)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if store.write(paused.Token()) {
		t.Fatal("the paused holder's late write was accepted")
	}
	if err := paused.Release(t.Context()); !errors.Is(err, fencing.ErrNotHeld) {
		t.Fatalf("paused Release: got %v, want ErrNotHeld", err)
	}
	if store.rejected != 1 || store.writes != 1 {
		t.Fatalf("writes %d rejected %d, want 1 and 1", store.writes, store.rejected)
	}
}

func TestNoGoroutineLeakAfterManyCycles(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	l := newLocker(t, r)
	for i := range 300 {
		if err := l.Do(t.Context(), "res", func(context.Context) error { return nil }); err != nil {
			t.Fatalf("cycle %d: %v", i, err)
		}
	}
	// goleak in TestMain checks that nothing is left once the tests end.
}
