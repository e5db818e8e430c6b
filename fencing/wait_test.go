package fencing_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/internal/redistest"
)

// slowBackoff makes polling as slow as it gets: a queued waiter still polls once a second
// (0.8s at the earliest, with jitter), so a hand-off quicker than that came from a grant.
var slowBackoff = fencing.WithRetryBackoff(5*time.Second, 10*time.Second)

type acquired struct {
	lock *fencing.Lock
	err  error
	at   time.Time
}

func acquireAsync(ctx context.Context, l *fencing.Locker, resource string) <-chan acquired {
	ch := make(chan acquired, 1)
	go func() {
		lock, err := l.Acquire(ctx, resource)
		ch <- acquired{lock, err, time.Now()}
	}()
	return ch
}

func TestWaiterWakesOnRelease(t *testing.T) {
	r := redistest.New(t)
	holderLocker := newLocker(t, r)
	waiterLocker := newLocker(t, r, slowBackoff) // another process, as far as Redis can tell
	held := mustAcquire(t, holderLocker, "res")
	got := acquireAsync(t.Context(), waiterLocker, "res")
	waitFor(t, 2*time.Second, "the waiter to queue", func() bool { return fencing.Waiters(waiterLocker) == 1 })
	waitSubscribed(t, r, "res")
	released := time.Now()
	if err := held.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	a := <-got
	if a.err != nil {
		t.Fatal(a.err)
	}
	if d := a.at.Sub(released); d > quick {
		t.Fatalf("waiter took %v after the release: the grant's announcement did not wake it", d)
	}
	if a.lock.Token() != held.Token()+1 {
		t.Fatalf("got token %d, want %d", a.lock.Token(), held.Token()+1)
	}
}

// waitSubscribed waits until someone listens for the grants of resource: on a channel
// <prefix>{resource}:grant... (each waiting Locker has one of its own, see grant.lua).
func waitSubscribed(t *testing.T, r *redistest.Redis, resource string) {
	t.Helper()
	pattern := r.Prefix + "{" + resource + "}:grant*"
	waitFor(t, 2*time.Second, "the subscription", func() bool {
		return len(r.Client.PubSubChannels(context.Background(), pattern).Val()) > 0
	})
}

func TestWaiterWakesOnExpiry(t *testing.T) {
	r := redistest.New(t)
	l := newLocker(t, r, slowBackoff)
	const ttl = 200 * time.Millisecond
	crashed := mustAcquire(t, l, "res", fencing.WithTTL(ttl)) // never released: its holder "crashed"
	begin := time.Now()
	got := acquireAsync(t.Context(), l, "res")
	waitFor(t, 2*time.Second, "the waiter to queue", func() bool { return fencing.Waiters(l) == 1 })
	r.Advance(ttl + 50*time.Millisecond)
	var a acquired
	select {
	case a = <-got:
	case <-time.After(4 * time.Second):
		t.Fatal("waiter still waiting after the holder's TTL ran out")
	}
	if a.err != nil {
		t.Fatal(a.err)
	}
	if d := a.at.Sub(begin); d > 3*time.Second {
		t.Fatalf("waiter took %v; its poll (at most a second apart) should find the lease run out", d)
	}
	if a.lock.Token() != crashed.Token()+1 {
		t.Fatalf("got token %d, want %d", a.lock.Token(), crashed.Token()+1)
	}
}

// TestHolderCrashTakeover measures, on a real Redis, how soon after a crashed holder's lease
// ends a waiter of another Locker holds the lock: nothing announces a lease that runs out, so
// the waiter's poll finds it, every WithRetryBackoff max (at most a second, ±20% jitter). It
// checks the bound docs/waiting.md states for the default and for a 100ms max, with a
// loaded machine's slack, and logs the figures.
func TestHolderCrashTakeover(t *testing.T) {
	if !redistest.Real() {
		t.Skip("needs a real Redis (FENCING_REDIS_ADDR): miniredis moves TTLs only with FastForward")
	}
	const (
		lease  = 300 * time.Millisecond
		rounds = 5
	)
	for _, tc := range []struct {
		name  string
		opts  []fencing.Option
		bound time.Duration // the poll interval's most, jitter included
	}{
		{"default", nil, 1200 * time.Millisecond},
		{"backoff-max-100ms", []fencing.Option{fencing.WithRetryBackoff(10*time.Millisecond, 100*time.Millisecond)}, 120 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := redistest.New(t)
			crashed := newLocker(t, r) // its holders never release
			waiter := newLocker(t, r, tc.opts...)
			var worst time.Duration
			for i := range rounds {
				sent := time.Now()
				held := mustAcquire(t, crashed, "res"+strconv.Itoa(i), fencing.WithTTL(lease))
				lock, err := waiter.Acquire(t.Context(), "res"+strconv.Itoa(i))
				after := time.Since(sent.Add(lease)) // from the lease's end at the latest
				if err != nil {
					t.Fatal(err)
				}
				if lock.Token() != held.Token()+1 {
					t.Fatalf("got token %d, want %d", lock.Token(), held.Token()+1)
				}
				if err := lock.Release(t.Context()); err != nil {
					t.Fatal(err)
				}
				worst = max(worst, after)
			}
			t.Logf("FIGURE holder-crash %s: lease %v, %d rounds, the waiter held the lock at most %v after the lease's end", tc.name, lease, rounds, worst.Round(time.Millisecond))
			if slack := 500 * time.Millisecond; worst > tc.bound+slack {
				t.Fatalf("the waiter held the lock %v after the lease's end, want at most %v (+%v slack)", worst, tc.bound, slack)
			}
		})
	}
}

// TestWaiterSurvivesLostMessage frees the lock without a release message (as when a message
// is lost or the subscription is down): the back-off still gets the waiter in.
func TestWaiterSurvivesLostMessage(t *testing.T) {
	r := redistest.New(t)
	l := newLocker(t, r, fencing.WithRetryBackoff(20*time.Millisecond, 100*time.Millisecond))
	_ = mustAcquire(t, l, "res", fencing.WithTTL(time.Hour))
	got := acquireAsync(t.Context(), l, "res")
	waitFor(t, 2*time.Second, "the waiter to queue", func() bool { return fencing.Waiters(l) == 1 })
	r.Client.Del(context.Background(), r.Prefix+"{res}:lock")
	select {
	case a := <-got:
		if a.err != nil {
			t.Fatal(a.err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("waiter stuck after a lost release message")
	}
}

func TestWaiterSurvivesDroppedSubscription(t *testing.T) {
	r := redistest.New(t)
	if r.Mini != nil {
		t.Skip("miniredis has no CLIENT KILL; runs with FENCING_REDIS_ADDR")
	}
	holder := newLocker(t, r)
	waiter := newLocker(t, r, fencing.WithRetryBackoff(50*time.Millisecond, 200*time.Millisecond))
	held := mustAcquire(t, holder, "res")
	got := acquireAsync(t.Context(), waiter, "res")
	waitFor(t, 2*time.Second, "the waiter to queue", func() bool { return fencing.Waiters(waiter) == 1 })
	waitSubscribed(t, r, "res")
	if err := r.Client.ClientKillByFilter(context.Background(), "TYPE", "pubsub").Err(); err != nil {
		t.Fatal(err)
	}
	_ = held.Release(t.Context())
	select {
	case a := <-got:
		if a.err != nil {
			t.Fatal(a.err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("waiter stuck after its subscription was killed")
	}
	// The subscription comes back: a later hand-off is woken by a message again.
	held2 := mustAcquire(t, holder, "res2")
	got2 := acquireAsync(t.Context(), waiter, "res2")
	waitFor(t, 2*time.Second, "the waiter to queue", func() bool { return fencing.Waiters(waiter) == 1 })
	waitSubscribed(t, r, "res2")
	_ = held2.Release(t.Context())
	select {
	case a := <-got2:
		if a.err != nil {
			t.Fatal(a.err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("second waiter stuck")
	}
}

func TestCancelledWaitersLeaveNothing(t *testing.T) {
	r := redistest.New(t)
	l := newLocker(t, r)
	_ = mustAcquire(t, l, "res")
	ctx, cancel := context.WithCancel(t.Context())
	const n = 300
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Go(func() {
			_, err := l.Acquire(ctx, "res")
			errs <- err
		})
	}
	waitFor(t, 5*time.Second, "all waiters to queue", func() bool { return fencing.Waiters(l) == n })
	cancel()
	wg.Wait()
	close(errs)
	for err := range errs {
		if !errors.Is(err, fencing.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
			t.Fatalf("got %v, want ErrNotAcquired and context.Canceled", err)
		}
	}
	if w := fencing.Waiters(l); w != 0 {
		t.Fatalf("%d waiters still registered", w)
	}
	// goleak in TestMain checks the goroutines.
}

func TestCloseWakesWaiters(t *testing.T) {
	r := redistest.New(t)
	l := fencing.New(r.Client, fencing.WithPrefix(r.Prefix))
	held := mustAcquire(t, l, "res")
	got := acquireAsync(t.Context(), l, "res")
	waitFor(t, 2*time.Second, "the waiter to queue", func() bool { return fencing.Waiters(l) == 1 })
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if a := <-got; !errors.Is(a.err, fencing.ErrClosed) {
		t.Fatalf("waiter: got %v, want ErrClosed", a.err)
	}
	if _, err := l.TryAcquire(t.Context(), "other"); !errors.Is(err, fencing.ErrClosed) {
		t.Fatalf("TryAcquire after Close: got %v, want ErrClosed", err)
	}
	if err := held.Release(t.Context()); err != nil {
		t.Fatalf("Release after Close: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// TestWaitersServedInOrder checks the FIFO queue of one Locker.
func TestWaitersServedInOrder(t *testing.T) {
	r := redistest.New(t)
	l := newLocker(t, r, slowBackoff)
	held := mustAcquire(t, l, "res")
	const n = 5
	order := make(chan int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			lock, err := l.Acquire(t.Context(), "res")
			if err != nil {
				t.Error(err)
				return
			}
			order <- i
			_ = lock.Release(context.Background())
		})
		// Queued, not Waiters: a waiter counts once its element is in Redis, so the next
		// cannot overtake it there.
		waitFor(t, 2*time.Second, "the waiter to queue", func() bool { return fencing.Queued(l) == i+1 })
	}
	_ = held.Release(t.Context())
	wg.Wait()
	close(order)
	want := 0
	for got := range order {
		if got != want {
			t.Fatalf("waiter %d served at position %d", got, want)
		}
		want++
	}
}
