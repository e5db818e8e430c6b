package fencing_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/fencing/observe"
	"github.com/fencekit/fencekit/internal/testkit/redistest"
)

// TestCounterExpiryRecreatesAboveOldTokens lets a resource's counter expire again and again:
// each counter created again starts at the server clock, so tokens keep increasing and a
// store that checks them accepts every write.
func TestCounterExpiryRecreatesAboveOldTokens(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	l := newLocker(t, r, fencing.WithCounterExpiry(time.Second), fencing.WithTTL(500*time.Millisecond))
	fence := r.Prefix + "{res}:fence"
	cycles := 20
	if r.Mini == nil {
		cycles = 4 // a real second each
	}
	var store fencedStore
	var last int64
	for i := range cycles {
		lock := mustAcquire(t, l, "res")
		if lock.Token() <= last {
			t.Fatalf("cycle %d: token %d after %d", i, lock.Token(), last)
		}
		last = lock.Token()
		if !store.write(lock.Token()) {
			t.Fatalf("cycle %d: the store refused token %d", i, lock.Token())
		}
		if ttl := r.Client.PTTL(context.Background(), fence).Val(); ttl <= 0 || ttl > time.Second {
			t.Fatalf("cycle %d: counter TTL %v, want (0, 1s]", i, ttl)
		}
		if err := lock.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
		r.Advance(1100 * time.Millisecond)
		if n := r.Client.Exists(context.Background(), fence).Val(); n != 0 {
			t.Fatalf("cycle %d: the idle counter did not expire", i)
		}
	}
	if store.rejected != 0 || store.writes != cycles {
		t.Fatalf("writes %d, rejected %d; want %d and 0", store.writes, store.rejected, cycles)
	}
}

// TestLockHeldAcrossCounterExpiry holds a lock while its counter expires: the holder keeps
// working, and the next acquisition's token is above the holder's.
func TestLockHeldAcrossCounterExpiry(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	// A lease a loaded machine cannot stall a renewal past (renewals go every third of it), as
	// long as the counter's idle period: the work outlasts both.
	l := newLocker(t, r, fencing.WithCounterExpiry(3*time.Second), fencing.WithTTL(3*time.Second))
	fence := r.Prefix + "{res}:fence"
	var held int64
	err := l.Do(t.Context(), "res", func(ctx context.Context) error {
		held, _ = fencing.TokenFromContext(ctx)
		if r.Mini != nil {
			r.Mini.Del(fence) // the counter's idle period ends; the lock's lease does not move
			return nil
		}
		deadline := time.Now().Add(time.Minute)
		for r.Client.Exists(ctx, fence).Val() == 1 {
			if time.Now().After(deadline) {
				return errors.New("the counter did not expire")
			}
			time.Sleep(50 * time.Millisecond)
		}
		time.Sleep(200 * time.Millisecond)
		return ctx.Err() // Do's renewals kept the lock
	})
	if err != nil {
		t.Fatalf("Do across the counter's expiry: %v", err)
	}
	next := mustAcquire(t, l, "res")
	defer next.Release(context.Background())
	if next.Token() <= held {
		t.Fatalf("token %d after the counter expired, want above %d", next.Token(), held)
	}
}

// TestCounterExpiryOptions checks the option's limits and that it implies the time floor.
func TestCounterExpiryOptions(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	for _, tc := range []struct {
		name string
		opts []fencing.Option
		call []fencing.CallOption
	}{
		{"below the minimum", []fencing.Option{fencing.WithCounterExpiry(500 * time.Millisecond)}, nil},
		{"zero", []fencing.Option{fencing.WithCounterExpiry(0)}, nil},
		{"shorter than the lease", []fencing.Option{fencing.WithCounterExpiry(time.Second), fencing.WithTTL(2 * time.Second)}, nil},
		{"shorter than a call's lease", []fencing.Option{fencing.WithCounterExpiry(time.Minute)}, []fencing.CallOption{fencing.WithTTL(2 * time.Minute)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newLocker(t, r, tc.opts...)
			if _, err := l.TryAcquire(t.Context(), "res", tc.call...); !errors.Is(err, fencing.ErrInvalid) {
				t.Fatalf("got %v, want ErrInvalid", err)
			}
		})
	}
	if n := r.Client.Exists(context.Background(), r.Prefix+"{res}:fence", r.Prefix+"{res}:lock").Val(); n != 0 {
		t.Fatal("a refused call wrote keys")
	}
	now := r.Client.Time(context.Background()).Val().UnixMicro()
	lock := mustAcquire(t, newLocker(t, r, fencing.WithCounterExpiry(time.Minute)), "res")
	defer lock.Release(context.Background())
	if lock.Token() < now {
		t.Fatalf("token %d below the server clock %d: the time floor is not implied", lock.Token(), now)
	}
}

// TestClockStepBack steps the server clock back (miniredis's SetTime). While the counter
// exists, tokens keep increasing and the acquisition reports how far the clock is behind;
// once the counter has expired, the new counter starts lower, and a store that checks tokens
// refuses the new holder's writes: no stale write is accepted, progress stops until the clock
// catches up.
func TestClockStepBack(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	if r.Mini == nil {
		t.Skip("steps the server clock with miniredis's SetTime; a real server's clock is not the test's to move")
	}
	var mu sync.Mutex
	var behind []time.Duration
	hooks := fencing.WithHooks(observe.Hooks{End: func(_ context.Context, e observe.Event) {
		if e.Outcome == observe.OutcomeAcquired {
			mu.Lock()
			behind = append(behind, e.ClockBehind)
			mu.Unlock()
		}
	}})
	l := newLocker(t, r, fencing.WithCounterExpiry(time.Second), fencing.WithTTL(time.Second), hooks)
	now := time.Now()
	r.Mini.SetTime(now)
	var store fencedStore
	step := func() (int64, bool) {
		t.Helper()
		lock := mustAcquire(t, l, "res")
		defer lock.Release(context.Background())
		return lock.Token(), store.write(lock.Token())
	}
	t1, ok1 := step()
	r.Mini.SetTime(now.Add(-10 * time.Second))
	t2, ok2 := step()
	if !ok1 || !ok2 || t2 <= t1 {
		t.Fatalf("tokens %d then %d (accepted %v, %v): the existing counter must keep increasing", t1, t2, ok1, ok2)
	}
	mu.Lock()
	got := append([]time.Duration(nil), behind...)
	mu.Unlock()
	if len(got) != 2 || got[0] != 0 || got[1] < 9*time.Second || got[1] > 11*time.Second {
		t.Fatalf("ClockBehind %v, want 0 then about 10s", got)
	}
	r.Mini.Del(r.Prefix + "{res}:fence") // the counter's idle period passed
	t3, ok3 := step()
	if t3 >= t2 || ok3 {
		t.Fatalf("token %d after the counter expired under a stepped-back clock (accepted %v): want one below %d, refused", t3, ok3, t2)
	}
	if store.rejected != 1 || store.writes != 2 {
		t.Fatalf("writes %d, rejected %d; want 2 and 1", store.writes, store.rejected)
	}
}

// TestGrantResetsCounterExpiry checks that a grant from the queue, like an acquisition,
// resets the counter's expiry and floors the token.
func TestGrantResetsCounterExpiry(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	opts := []fencing.Option{fencing.WithCounterExpiry(time.Minute), fencing.WithTTL(time.Second)}
	holder, waiter := process(t, r, opts...), process(t, r, opts...)
	held := mustAcquire(t, holder, "res")
	fence := r.Prefix + "{res}:fence"
	r.Client.PExpire(context.Background(), fence, 10*time.Second) // as if idle for 50s
	lock := handOver(t, r, held, waiter, nil)
	if ttl := r.Client.PTTL(context.Background(), fence).Val(); ttl < 50*time.Second || ttl > time.Minute {
		t.Fatalf("counter TTL after the grant: %v, want reset to about a minute", ttl)
	}
	if lock.Token() <= held.Token() {
		t.Fatalf("granted token %d, want above %d", lock.Token(), held.Token())
	}
}

// TestQueueKeysDoNotOutliveWaiters checks that the waiting queue leaves nothing behind: once
// the waiters are served or gone, the queue and the waiters' keys expire within 3s, and only
// the counter remains (it too expires with WithCounterExpiry).
func TestQueueKeysDoNotOutliveWaiters(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	opts := []fencing.Option{fencing.WithCounterExpiry(time.Second), fencing.WithTTL(time.Second)}
	holder, waiter, quitter := process(t, r, opts...), process(t, r, opts...), process(t, r, opts...)
	held := mustAcquire(t, holder, "res")
	qctx, cancel := context.WithCancel(t.Context())
	quit := acquireAsync(qctx, quitter, "res")
	waitFor(t, 5*time.Second, "the quitter in the queue", func() bool { return queueLen(r, "res") == 1 })
	got := acquireAsync(t.Context(), waiter, "res")
	waitFor(t, 5*time.Second, "the waiter in the queue behind it", func() bool { return queueLen(r, "res") == 2 })
	cancel() // the quitter leaves as the holder releases
	if err := held.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	if a := <-quit; a.err == nil {
		_ = a.lock.Release(t.Context())
	}
	a := <-got
	if a.err != nil {
		t.Fatal(a.err)
	}
	if err := a.lock.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	keys := func() []string {
		return r.Client.Keys(context.Background(), r.Prefix+"*").Val()
	}
	r.Advance(3500 * time.Millisecond)
	var left []string
	for _, k := range keys() {
		// The release records expire 10 s after their release (see release.lua).
		if !strings.Contains(k, "}:r:") {
			left = append(left, k)
		} else if ttl := r.Client.PTTL(context.Background(), k).Val(); ttl <= 0 || ttl > 10*time.Second {
			t.Errorf("release record %q has TTL %v, want at most 10s", k, ttl)
		}
	}
	if len(left) != 0 {
		t.Fatalf("keys left 3.5s after the last waiter: %q", left)
	}
	r.Advance(7 * time.Second)
	if left := keys(); len(left) != 0 {
		t.Fatalf("keys left 10.5s after the last release: %q", left)
	}
}
