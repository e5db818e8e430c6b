package fencing_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/internal/testkit/redistest"
	"github.com/fencekit/fencekit/store"
)

var shared = fencing.Shared()

// TestSharedTryAcquire checks the shared mode's basics: shared holders hold together, each
// with its own token; an exclusive acquisition is busy while any holds, and a shared one while
// an exclusive holder holds; Lock.Shared reports the mode; the last release frees the resource.
func TestSharedTryAcquire(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	ctx := t.Context()
	l := newLocker(t, r)
	a := mustAcquire(t, l, "acct", shared)
	b := mustAcquire(t, l, "acct", shared)
	if !a.Shared() || !b.Shared() || b.Token() <= a.Token() {
		t.Fatalf("got shared %v %v, tokens %d %d; want two shared holders, increasing tokens", a.Shared(), b.Shared(), a.Token(), b.Token())
	}
	if (*fencing.Lock)(nil).Shared() {
		t.Fatal("a nil Lock reports shared")
	}
	_, err := l.TryAcquire(ctx, "acct")
	var busy *fencing.BusyError
	if !errors.As(err, &busy) || busy.RetryAfter <= 0 {
		t.Fatalf("exclusive TryAcquire beside shared holders: got %v, want busy with the holders' lease", err)
	}
	for _, k := range []*fencing.Lock{a, b} {
		if ttl, err := k.TTL(ctx); err != nil || ttl <= 0 || ttl > fencing.DefaultTTL {
			t.Fatalf("TTL: %v, %v", ttl, err)
		}
		if err := k.Extend(ctx, time.Minute); err != nil {
			t.Fatalf("Extend: %v", err)
		}
	}
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.Release(ctx); !errors.Is(err, fencing.ErrNotHeld) {
		t.Fatalf("second Release: got %v, want ErrNotHeld", err)
	}
	if _, err := l.TryAcquire(ctx, "acct"); !errors.Is(err, fencing.ErrNotAcquired) {
		t.Fatalf("exclusive TryAcquire beside one shared holder: got %v, want busy", err)
	}
	if err := b.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if st, err := l.Inspect(ctx, "acct"); err != nil || len(st.Holders) != 0 {
		t.Fatalf("after the last shared holder: %+v, %v; want no holder", st, err)
	}
	x := mustAcquire(t, l, "acct")
	if x.Shared() || x.Token() <= b.Token() {
		t.Fatalf("exclusive after the readers: shared %v token %d, want exclusive above %d", x.Shared(), x.Token(), b.Token())
	}
	if _, err := l.TryAcquire(ctx, "acct", shared); !errors.Is(err, fencing.ErrNotAcquired) {
		t.Fatalf("shared TryAcquire beside an exclusive holder: got %v, want busy", err)
	}
	if err := x.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestSharedBadInput checks that Shared with a limit above 1, with a set or with Lead is
// refused with ErrInvalid before anything is sent, and that a shared request on a resource
// held under a limit (or the reverse) names both modes and changes nothing.
func TestSharedBadInput(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	ctx := t.Context()
	l := newLocker(t, r)
	fn := func(context.Context) error { return errors.New("ran") }
	before := keysCount(t, r)
	for name, err := range map[string]error{
		"with a limit":  l.Do(ctx, "r", fn, shared, fencing.WithLimit(3)),
		"DoAll":         l.DoAll(ctx, []string{"r"}, fn, shared),
		"AcquireAll":    second(l.AcquireAll(ctx, []string{"r", "s"}, shared)),
		"TryAcquireAll": second(l.TryAcquireAll(ctx, []string{"r"}, shared)),
		"Lead":          l.Lead(ctx, "r", fn, shared),
	} {
		if !errors.Is(err, fencing.ErrInvalid) {
			t.Errorf("%s: got %v, want ErrInvalid", name, err)
		}
	}
	if after := keysCount(t, r); after != before {
		t.Fatalf("%d keys before, %d after: a refused call wrote", before, after)
	}

	limited := mustAcquire(t, l, "lim", fencing.WithLimit(2))
	snapshot := r.Client.HGetAll(ctx, r.Prefix+"{lim}:lock").Val()
	_, err := l.TryAcquire(ctx, "lim", shared)
	if !errors.Is(err, fencing.ErrInvalid) || !strings.Contains(err.Error(), "limit 2") || !strings.Contains(err.Error(), "shared") {
		t.Fatalf("shared on a limited resource: got %v, want ErrInvalid naming limit 2 and shared", err)
	}
	if got := r.Client.HGetAll(ctx, r.Prefix+"{lim}:lock").Val(); fmt.Sprint(got) != fmt.Sprint(snapshot) {
		t.Fatalf("the refused call changed the holders: %v, then %v", snapshot, got)
	}
	_ = limited.Release(ctx)

	reader := mustAcquire(t, l, "sh", shared)
	_, err = l.Acquire(ctx, "sh", fencing.WithLimit(2))
	if !errors.Is(err, fencing.ErrInvalid) || !strings.Contains(err.Error(), "limit 2") || !strings.Contains(err.Error(), "shared") {
		t.Fatalf("a limit on a shared resource: got %v, want ErrInvalid naming both", err)
	}
	_ = reader.Release(ctx)
}

func second[T any](_ T, err error) error { return err }

// TestSharedQueue checks the order of a mixed queue: a writer waiting behind readers is served
// when the last reader leaves; readers that arrive while the writer waits queue behind it
// (no starvation), and the writer's release grants the whole run of them at once; a writer
// behind them waits for all of them.
func TestSharedQueue(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	ctx := t.Context()
	lockers := []*fencing.Locker{newLocker(t, r), newLocker(t, r), newLocker(t, r)}
	r1 := mustAcquire(t, lockers[0], "acct", shared)
	writer := acquireAsync(ctx, lockers[1], "acct")
	waitFor(t, 5*time.Second, "the writer in the queue", func() bool { return queueLen(r, "acct") == 1 })
	if _, err := lockers[2].TryAcquire(ctx, "acct", shared); !errors.Is(err, fencing.ErrNotAcquired) {
		t.Fatalf("a reader while a writer waits: got %v, want busy (no barging)", err)
	}
	var readers []<-chan acquired
	for i := range 4 {
		readers = append(readers, acquireAsync(ctx, lockers[i%3], "acct", shared))
		waitFor(t, 5*time.Second, "the readers in the queue", func() bool { return queueLen(r, "acct") == int64(i+2) })
	}
	writer2 := acquireAsync(ctx, lockers[2], "acct")
	waitFor(t, 5*time.Second, "the second writer in the queue", func() bool { return queueLen(r, "acct") == 6 })
	if err := r1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	w := <-writer
	if w.err != nil || w.lock.Shared() || w.lock.Token() <= r1.Token() {
		t.Fatalf("writer: %v, want the lock after the reader", w.err)
	}
	if err := w.lock.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// The run of four readers, granted together by the writer's release.
	var held []*fencing.Lock
	for _, ch := range readers {
		a := <-ch
		if a.err != nil || !a.lock.Shared() || a.lock.Token() <= w.lock.Token() {
			t.Fatalf("reader: %v (token %d after the writer's %d)", a.err, a.lock.Token(), w.lock.Token())
		}
		held = append(held, a.lock)
	}
	select {
	case a := <-writer2:
		t.Fatalf("the second writer got the lock beside readers: %v", a.err)
	default:
	}
	for _, k := range held {
		if err := k.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	w2 := <-writer2
	if w2.err != nil {
		t.Fatal(w2.err)
	}
	for _, k := range held {
		if w2.lock.Token() <= k.Token() {
			t.Fatalf("writer token %d not above reader token %d", w2.lock.Token(), k.Token())
		}
	}
	_ = w2.lock.Release(ctx)
}

// TestSharedContention runs 100 readers and 20 writers through Do on one resource: readers
// overlap, no writer ever overlaps anyone, and a store that keeps the highest token it saw
// refuses no write that a writer made under the lock.
func TestSharedContention(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	lockers := []*fencing.Locker{newLocker(t, r), newLocker(t, r), newLocker(t, r), newLocker(t, r)}
	var st store.Memory
	var readers, writers, maxReaders, overlaps atomic.Int64
	var wg sync.WaitGroup
	run := func(i int, write bool) {
		defer wg.Done()
		var opts []fencing.CallOption
		if !write {
			opts = append(opts, shared)
		}
		err := lockers[i%len(lockers)].Do(t.Context(), "acct", func(ctx context.Context) error {
			token, _ := fencing.TokenFromContext(ctx)
			if write {
				if writers.Add(1) != 1 || readers.Load() != 0 {
					overlaps.Add(1)
				}
				defer writers.Add(-1)
				return st.Write("acct", token, func() error { time.Sleep(time.Millisecond); return nil })
			}
			n := readers.Add(1)
			defer readers.Add(-1)
			for m := maxReaders.Load(); n > m && !maxReaders.CompareAndSwap(m, n); m = maxReaders.Load() {
			}
			if writers.Load() != 0 {
				overlaps.Add(1)
			}
			time.Sleep(2 * time.Millisecond)
			return nil
		}, opts...)
		if err != nil {
			t.Error(err)
		}
	}
	for i := range 120 {
		wg.Add(1)
		go run(i, i%6 == 0)
	}
	wg.Wait()
	if overlaps.Load() != 0 {
		t.Fatalf("%d sections overlapped a writer", overlaps.Load())
	}
	if maxReaders.Load() < 2 {
		t.Fatalf("at most %d readers at once: readers never overlapped", maxReaders.Load())
	}
	t.Logf("at most %d readers at once", maxReaders.Load())
}

// TestSharedHolderLeaseEnds checks that a shared holder that never releases (a killed
// process) frees its place when its lease ends: a writer queued behind it gets the resource,
// with a token above the reader's, once the lease has run out.
func TestSharedHolderLeaseEnds(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	ctx := t.Context()
	l := newLocker(t, r)
	dead := mustAcquire(t, l, "acct", shared, fencing.WithTTL(time.Second))
	live := mustAcquire(t, l, "acct", shared, fencing.WithTTL(time.Minute))
	writer := acquireAsync(ctx, newLocker(t, r), "acct")
	waitFor(t, 5*time.Second, "the writer in the queue", func() bool { return queueLen(r, "acct") == 1 })
	if err := live.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r.Advance(1100 * time.Millisecond) // the dead reader's lease ends
	w := <-writer
	if w.err != nil {
		t.Fatal(w.err)
	}
	defer func() { _ = w.lock.Release(context.Background()) }()
	if w.lock.Token() <= live.Token() {
		t.Fatalf("writer token %d, want above the readers' %d", w.lock.Token(), live.Token())
	}
	if err := dead.Extend(ctx, time.Minute); !errors.Is(err, fencing.ErrNotHeld) {
		t.Fatalf("the dead reader's Extend: got %v, want ErrNotHeld", err)
	}
}

// TestSharedTokensAcrossLostCounter checks shared acquisitions with the server-time floor
// and with a counter expiry: after the counter is lost, a shared token is still above every
// earlier one, and the counter expires as configured.
func TestSharedTokensAcrossLostCounter(t *testing.T) {
	t.Parallel()
	for name, opt := range map[string]fencing.Option{
		"time floor":     fencing.WithServerTimeFloor(),
		"counter expiry": fencing.WithCounterExpiry(time.Hour),
	} {
		t.Run(name, func(t *testing.T) {
			r := redistest.New(t)
			ctx := t.Context()
			l := newLocker(t, r, opt)
			first := mustAcquire(t, l, "acct", shared)
			if err := first.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if err := r.Client.Del(ctx, r.Prefix+"{acct}:fence").Err(); err != nil {
				t.Fatal(err)
			}
			next := mustAcquire(t, l, "acct", shared)
			defer func() { _ = next.Release(context.Background()) }()
			if next.Token() <= first.Token() {
				t.Fatalf("token %d after the lost counter, want above %d", next.Token(), first.Token())
			}
			ttl := r.Client.PTTL(ctx, r.Prefix+"{acct}:fence").Val()
			if name == "counter expiry" && (ttl <= 59*time.Minute || ttl > time.Hour) {
				t.Fatalf("counter TTL %v, want the hour of WithCounterExpiry", ttl)
			}
		})
	}
}
