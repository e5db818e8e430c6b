package fencing_test

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/internal/testkit/redistest"
)

// TestOptionKinds checks the split of the options: those that every process locking the
// same resources must agree on, and the poll back-off, are Options only, and their result
// type does not satisfy CallOption, so passing one to a call does not compile; the others
// are CallOptions, which New takes too.
func TestOptionKinds(t *testing.T) {
	t.Parallel()
	option := reflect.TypeFor[fencing.Option]()
	call := reflect.TypeFor[fencing.CallOption]()
	if option.Implements(call) {
		t.Fatal("Option satisfies CallOption: a Locker's option would compile per call")
	}
	if !call.Implements(option) {
		t.Fatal("CallOption does not satisfy Option: New would not take the call options")
	}
	for name, fn := range map[string]any{
		"WithPrefix": fencing.WithPrefix, "WithServerTimeFloor": fencing.WithServerTimeFloor,
		"WithCounterExpiry": fencing.WithCounterExpiry, "WithRetryBackoff": fencing.WithRetryBackoff,
	} {
		if out := reflect.TypeOf(fn).Out(0); out != option {
			t.Errorf("%s returns %v, want fencing.Option", name, out)
		}
	}
	for name, fn := range map[string]any{
		"WithTTL": fencing.WithTTL, "WithMaxWait": fencing.WithMaxWait, "WithLimit": fencing.WithLimit,
		"WithReplicas": fencing.WithReplicas, "WithHooks": fencing.WithHooks, "Shared": fencing.Shared,
	} {
		if out := reflect.TypeOf(fn).Out(0); out != call {
			t.Errorf("%s returns %v, want fencing.CallOption", name, out)
		}
	}
}

// TestGrantFollowsTheWaitersRules checks that a grant from the queue issues its token under the
// rules of the waiter's own acquisition, whichever Locker releases: a Locker with the time
// floor waits, a Locker without it releases after the counter was deleted, and the waiter's
// token is still above every token issued before; with a counter expiry, the grant gives the
// counter the waiter's expiry.
func TestGrantFollowsTheWaitersRules(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		waiter []fencing.Option
		expiry time.Duration
	}{
		{"time floor", []fencing.Option{fencing.WithServerTimeFloor()}, 0},
		{"counter expiry", []fencing.Option{fencing.WithCounterExpiry(time.Hour)}, time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := redistest.New(t)
			ctx := t.Context()
			plain := newLocker(t, r)
			waiter := newLocker(t, r, tc.waiter...)
			first := mustAcquire(t, waiter, "res") // floored: about the server clock in µs
			if err := first.Release(ctx); err != nil {
				t.Fatal(err)
			}
			held := mustAcquire(t, plain, "res")
			got := acquireAsync(ctx, waiter, "res")
			waitFor(t, 5*time.Second, "the waiter in the queue", func() bool { return queueLen(r, "res") == 1 })
			// The counter is lost (an eviction, a restart without persistence): a plain
			// acquisition would start again at 1.
			if err := r.Client.Del(ctx, r.Prefix+"{res}:fence").Err(); err != nil {
				t.Fatal(err)
			}
			if err := held.Release(ctx); err != nil {
				t.Fatal(err)
			}
			a := <-got
			if a.err != nil {
				t.Fatal(a.err)
			}
			defer func() { _ = a.lock.Release(context.Background()) }()
			if a.lock.Token() <= max(first.Token(), held.Token()) {
				t.Fatalf("granted token %d, want above %d and %d: the waiter's floor was not used", a.lock.Token(), first.Token(), held.Token())
			}
			ttl := r.Client.PTTL(ctx, r.Prefix+"{res}:fence").Val()
			switch {
			case tc.expiry == 0 && ttl > 0:
				t.Fatalf("counter TTL %v, want none", ttl)
			case tc.expiry > 0 && (ttl <= tc.expiry-time.Minute || ttl > tc.expiry):
				t.Fatalf("counter TTL %v, want the waiter's expiry %v", ttl, tc.expiry)
			}
		})
	}
}

// TestExtendKeepsTheGrantsExtension checks that Extend does not cut short the lease of a lock
// taken from the queue: an invalid TTL and a failed extension leave the pending extension of
// the grant's short lease to the Locker's TTL in place, and an extension that takes effect
// replaces it.
func TestExtendKeepsTheGrantsExtension(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	ctx := t.Context()
	holder := newLocker(t, r)
	f := &failCalls{match: evalsha(fencing.ExtendSHA(), 6), times: 1}
	f.err.Store(replyError(t, "TRYAGAIN Multiple keys request during rehashing of slot"))
	waiter := hooked(t, r, f)
	granted := func() *fencing.Lock {
		t.Helper()
		held := mustAcquire(t, holder, "res")
		got := acquireAsync(ctx, waiter, "res")
		waitFor(t, 5*time.Second, "the waiter in the queue", func() bool { return queueLen(r, "res") == 1 })
		if err := held.Release(ctx); err != nil {
			t.Fatal(err)
		}
		a := <-got
		if a.err != nil {
			t.Fatal(a.err)
		}
		if ttl, err := a.lock.TTL(ctx); err != nil || ttl > 3*time.Second {
			t.Fatalf("TTL %v, %v right after the hand-off: want the grant's lease, 3s at most", ttl, err)
		}
		return a.lock
	}
	extended := func(lock *fencing.Lock, over time.Duration) {
		t.Helper()
		waitFor(t, 5*time.Second, "the lease extended", func() bool {
			ttl, err := lock.TTL(ctx)
			return err == nil && ttl > over
		})
	}

	lock := granted()
	if !fencing.Pending(lock) {
		t.Fatal("no extension of the grant's lease pending")
	}
	if err := lock.Extend(ctx, 0); !errors.Is(err, fencing.ErrInvalid) || !fencing.Pending(lock) {
		t.Fatalf("Extend(0): got %v (pending %v), want ErrInvalid and the extension still pending", err, fencing.Pending(lock))
	}
	f.armed.Store(true)
	if err := lock.Extend(ctx, time.Minute); err == nil || errors.Is(err, fencing.ErrNotHeld) || !fencing.Pending(lock) {
		t.Fatalf("Extend with Redis failing: got %v (pending %v), want its error and the extension still pending", err, fencing.Pending(lock))
	}
	extended(lock, 3*time.Second) // the grant's extension to the TTL, 30s, still came
	if err := lock.Release(ctx); err != nil {
		t.Fatal(err)
	}

	lock = granted()
	if err := lock.Extend(ctx, 10*time.Second); err != nil || fencing.Pending(lock) {
		t.Fatalf("Extend(10s): got %v (pending %v), want nil and the grant's extension cancelled", err, fencing.Pending(lock))
	}
	ttl, err := lock.TTL(ctx)
	if err != nil || ttl <= 3*time.Second || ttl > 10*time.Second {
		t.Fatalf("TTL after Extend(10s): %v, %v", ttl, err)
	}
	if err := lock.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestBusyError checks the exported busy error: errors.As finds it with the resource and the
// holder's remaining lease, it matches ErrNotAcquired, and a wait's error says it waited.
func TestBusyError(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	ctx := t.Context()
	l := newLocker(t, r)
	held := mustAcquire(t, l, "res")
	defer func() { _ = held.Release(context.Background()) }()

	_, err := l.TryAcquire(ctx, "res")
	var busy *fencing.BusyError
	if !errors.As(err, &busy) || !errors.Is(err, fencing.ErrNotAcquired) {
		t.Fatalf("TryAcquire: got %v, want a *BusyError matching ErrNotAcquired", err)
	}
	if busy.Resource != "res" || busy.RetryAfter <= 0 || busy.RetryAfter > fencing.DefaultTTL || busy.Waited != 0 || busy.Ahead != -1 {
		t.Fatalf("got %+v, want res, (0, 30s], not waited, -1 ahead", busy)
	}
	if d, ok := fencing.RetryAfter(err); !ok || d != busy.RetryAfter {
		t.Fatalf("RetryAfter: %v %v, want %v", d, ok, busy.RetryAfter)
	}
	if b := (*fencing.BusyError)(nil); !errors.As(err, &b) || b.Resource != "res" {
		t.Fatalf("BusyError.Resource: %v", err)
	}

	_, err = l.Acquire(ctx, "res", fencing.WithMaxWait(50*time.Millisecond))
	if !errors.As(err, &busy) || busy.Waited < 50*time.Millisecond || busy.Ahead != 0 {
		t.Fatalf("Acquire under WithMaxWait: got %v (%+v), want a *BusyError that waited, first in the queue", err, busy)
	}
	wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	_, err = l.Acquire(wctx, "res")
	if !errors.As(err, &busy) || !errors.Is(err, context.DeadlineExceeded) || busy.Waited <= 0 {
		t.Fatalf("Acquire until the context ends: got %v, want a *BusyError that waited and the context's error", err)
	}
}

// TestTokenOfNestedResources checks that the context of work holding the locks of more than
// one resource gives no single token nor lease end: a Do of one resource nested in a Do of
// another, a DoAll of several, a Do inside a token put by ContextWithToken. TokenFor names the
// one wanted. A DoAll of one resource, alone, gives both.
func TestTokenOfNestedResources(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	ctx := t.Context()
	l := newLocker(t, r)
	single := func(what string, ctx context.Context, want bool) {
		t.Helper()
		_, tok := fencing.TokenFromContext(ctx)
		_, until := fencing.ValidUntilFromContext(ctx)
		if tok != want || until != want {
			t.Errorf("%s: TokenFromContext %v, ValidUntilFromContext %v; want %v", what, tok, until, want)
		}
	}
	err := l.Do(ctx, "order:42", func(ctx context.Context) error {
		single("Do", ctx, true)
		order, _ := fencing.TokenFromContext(ctx)
		return l.Do(ctx, "customer:7", func(ctx context.Context) error {
			single("Do of customer:7 inside Do of order:42", ctx, false)
			if tok, ok := fencing.TokenFor(ctx, "order:42"); !ok || tok != order {
				t.Errorf("TokenFor(order:42): %d %v, want %d", tok, ok, order)
			}
			if _, ok := fencing.TokenFor(ctx, "customer:7"); !ok {
				t.Error("TokenFor(customer:7): none")
			}
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	err = l.DoAll(ctx, []string{"a"}, func(ctx context.Context) error {
		single("DoAll of one", ctx, true)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	err = l.DoAll(ctx, []string{"a", "b"}, func(ctx context.Context) error {
		single("DoAll of two", ctx, false)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	err = l.Do(fencing.ContextWithToken(ctx, 99), "a", func(ctx context.Context) error {
		single("Do inside ContextWithToken", ctx, false)
		if tok, ok := fencing.TokenFromContext(fencing.ContextWithToken(ctx, 5)); !ok || tok != 5 {
			t.Errorf("ContextWithToken inside Do: %d %v, want 5", tok, ok)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
