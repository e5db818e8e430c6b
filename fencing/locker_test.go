package fencing_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/internal/testkit/redistest"
)

func newLocker(t *testing.T, r *redistest.Redis, opts ...fencing.Option) *fencing.Locker {
	t.Helper()
	l := fencing.New(r.Client, append([]fencing.Option{fencing.WithPrefix(r.Prefix)}, opts...)...)
	t.Cleanup(func() { _ = l.Close() })
	return l
}

func mustAcquire(t *testing.T, l *fencing.Locker, resource string, opts ...fencing.CallOption) *fencing.Lock {
	t.Helper()
	lock, err := l.TryAcquire(t.Context(), resource, opts...)
	if err != nil {
		t.Fatalf("TryAcquire(%q): %v", resource, err)
	}
	return lock
}

func TestTryAcquireRelease(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	l := newLocker(t, r)
	ctx := t.Context()

	a := mustAcquire(t, l, "order-42")
	if a.Token() != 1 || a.Resource() != "order-42" {
		t.Fatalf("got token %d resource %q, want 1 and order-42", a.Token(), a.Resource())
	}
	if got := r.Client.Exists(ctx, r.Prefix+"{order-42}:lock", r.Prefix+"{order-42}:fence").Val(); got != 2 {
		t.Fatalf("got %d of the documented keys, want 2", got)
	}
	_, err := l.TryAcquire(ctx, "order-42")
	if !errors.Is(err, fencing.ErrNotAcquired) {
		t.Fatalf("second TryAcquire: got %v, want ErrNotAcquired", err)
	}
	if d, ok := fencing.RetryAfter(err); !ok || d <= 0 || d > fencing.DefaultTTL {
		t.Fatalf("RetryAfter: got %v %v, want (0, 30s]", d, ok)
	}
	if err := a.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if err := a.Release(ctx); !errors.Is(err, fencing.ErrNotHeld) {
		t.Fatalf("second Release: got %v, want ErrNotHeld", err)
	}
	b := mustAcquire(t, l, "order-42")
	if b.Token() != 2 {
		t.Fatalf("got token %d after release, want 2", b.Token())
	}
	if ttl := r.Client.TTL(ctx, r.Prefix+"{order-42}:fence").Val(); ttl != -1 {
		t.Fatalf("fence key TTL: got %v, want none (-1)", ttl)
	}
}

func TestTokensIncreaseAcrossExpiryAndIdle(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	// Leases long enough that a slow reply on a loaded machine still comes back within them.
	l := newLocker(t, r, fencing.WithTTL(2*time.Second))
	ctx := t.Context()
	var last int64
	for i := range 5 {
		lock := mustAcquire(t, l, "res")
		if lock.Token() <= last {
			t.Fatalf("round %d: token %d after %d", i, lock.Token(), last)
		}
		last = lock.Token()
		switch i % 3 {
		case 0:
			_ = lock.Release(ctx)
		case 1:
			r.Advance(2100 * time.Millisecond) // expiry
		case 2:
			_ = lock.Release(ctx)
			r.Advance(600 * time.Millisecond) // idle
		}
	}
}

func TestStaleReleaseAndExtend(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	l := newLocker(t, r, fencing.WithTTL(2*time.Second)) // a slow reply still comes back within it
	ctx := t.Context()

	old := mustAcquire(t, l, "res")
	r.Advance(2100 * time.Millisecond)
	if err := old.Extend(ctx, time.Second); !errors.Is(err, fencing.ErrNotHeld) {
		t.Fatalf("Extend after expiry: got %v, want ErrNotHeld", err)
	}
	if err := old.Release(ctx); !errors.Is(err, fencing.ErrNotHeld) {
		t.Fatalf("Release after expiry: got %v, want ErrNotHeld", err)
	}
	if n := r.Client.Exists(ctx, r.Prefix+"{res}:lock").Val(); n != 0 {
		t.Fatalf("stale Extend re-created the lock")
	}

	newer := mustAcquire(t, l, "res", fencing.WithTTL(time.Minute))
	if err := old.Extend(ctx, time.Hour); !errors.Is(err, fencing.ErrNotHeld) {
		t.Fatalf("Extend after takeover: got %v, want ErrNotHeld", err)
	}
	if err := old.Release(ctx); !errors.Is(err, fencing.ErrNotHeld) {
		t.Fatalf("Release after takeover: got %v, want ErrNotHeld", err)
	}
	ttl, err := newer.TTL(ctx)
	if err != nil || ttl > time.Minute || ttl < 30*time.Second {
		t.Fatalf("newer lock TTL: got %v, %v; want about 1m", ttl, err)
	}
	if _, err := old.TTL(ctx); !errors.Is(err, fencing.ErrNotHeld) {
		t.Fatalf("stale TTL: got %v, want ErrNotHeld", err)
	}
	if err := newer.Extend(ctx, 2*time.Minute); err != nil {
		t.Fatalf("Extend by holder: %v", err)
	}
	if ttl, _ := newer.TTL(ctx); ttl <= time.Minute {
		t.Fatalf("TTL after Extend: got %v, want above 1m", ttl)
	}
}

func TestOneWinner(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	l := newLocker(t, r)
	const n = 300
	var wins atomic.Int32
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range n {
		wg.Go(func() {
			<-start
			_, err := l.TryAcquire(context.Background(), "hot")
			switch {
			case err == nil:
				wins.Add(1)
			case !errors.Is(err, fencing.ErrNotAcquired):
				t.Errorf("TryAcquire: %v", err)
			}
		})
	}
	close(start)
	wg.Wait()
	if got := wins.Load(); got != 1 {
		t.Fatalf("got %d winners, want 1", got)
	}
}

func TestInvalidInput(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	l := newLocker(t, r)
	ctx := t.Context()
	cases := []struct {
		name     string
		locker   *fencing.Locker
		resource string
		opts     []fencing.CallOption
	}{
		{"empty resource", l, "", nil},
		{"oversized resource", l, strings.Repeat("x", fencing.MaxResourceLen+1), nil},
		{"zero ttl", l, "r", []fencing.CallOption{fencing.WithTTL(0)}},
		{"negative ttl", l, "r", []fencing.CallOption{fencing.WithTTL(-time.Second)}},
		{"sub-millisecond ttl", l, "r", []fencing.CallOption{fencing.WithTTL(time.Microsecond)}},
		{"huge ttl", l, "r", []fencing.CallOption{fencing.WithTTL(math.MaxInt64)}},
		{"brace in prefix", fencing.New(r.Client, fencing.WithPrefix("a{b")), "r", nil},
		{"nil client", fencing.New(nil), "r", nil},
		{"typed nil client", fencing.New((*redis.Client)(nil)), "r", nil},
		{"bad backoff", fencing.New(r.Client, fencing.WithRetryBackoff(time.Second, time.Millisecond)), "r", nil},
		{"shared with a limit", l, "r", []fencing.CallOption{fencing.Shared(), fencing.WithLimit(2)}},
		{"shared locker", fencing.New(r.Client, fencing.Shared()), "r", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := keysCount(t, r)
			if _, err := tc.locker.TryAcquire(ctx, tc.resource, tc.opts...); !errors.Is(err, fencing.ErrInvalid) {
				t.Errorf("TryAcquire: got %v, want ErrInvalid", err)
			}
			if _, err := tc.locker.Acquire(ctx, tc.resource, tc.opts...); !errors.Is(err, fencing.ErrInvalid) {
				t.Errorf("Acquire: got %v, want ErrInvalid", err)
			}
			called := false
			err := tc.locker.Do(ctx, tc.resource, func(context.Context) error { called = true; return nil }, tc.opts...)
			if !errors.Is(err, fencing.ErrInvalid) || called {
				t.Errorf("Do: got %v (called %v), want ErrInvalid without calling fn", err, called)
			}
			if after := keysCount(t, r); after != before {
				t.Errorf("keys: got %d after, %d before: bad input wrote something", after, before)
			}
		})
	}
	t.Run("extend ttl", func(t *testing.T) {
		lock := mustAcquire(t, l, "r")
		for _, ttl := range []time.Duration{0, -1, time.Microsecond, fencing.MaxTTL + 1} {
			if err := lock.Extend(ctx, ttl); !errors.Is(err, fencing.ErrInvalid) {
				t.Errorf("Extend(%v): got %v, want ErrInvalid", ttl, err)
			}
		}
		if d, err := lock.TTL(ctx); err != nil || d <= 0 {
			t.Errorf("after bad Extend: TTL %v, %v; the lock must be untouched", d, err)
		}
	})
	t.Run("nil lock", func(t *testing.T) {
		var lock *fencing.Lock
		if err := lock.Release(ctx); !errors.Is(err, fencing.ErrNotHeld) {
			t.Errorf("Release: got %v", err)
		}
		if err := lock.Extend(ctx, time.Second); !errors.Is(err, fencing.ErrNotHeld) {
			t.Errorf("Extend: got %v", err)
		}
		if _, err := lock.TTL(ctx); !errors.Is(err, fencing.ErrNotHeld) {
			t.Errorf("TTL: got %v", err)
		}
	})
}

// keysCount counts the keys under r's prefix but the release records, which keep a
// release's outcome for a retry for 10 s (see release.lua).
func keysCount(t *testing.T, r *redistest.Redis) int {
	t.Helper()
	keys, err := r.Client.Keys(context.Background(), r.Prefix+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, k := range keys {
		if !strings.Contains(k, "}:r:") && !strings.Contains(k, "}:b64:r:") {
			n++
		}
	}
	return n
}

func TestOddResourceNames(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	l := newLocker(t, r)
	names := []string{"a b", "line\nbreak", "\x00\xff\xfe", "{", "}", "{}", "a}b", "{x}", "x:fence", "ü-ñ", strings.Repeat("z", fencing.MaxResourceLen)}
	seen := map[string]bool{}
	for _, name := range names {
		lock := mustAcquire(t, l, name)
		if lock.Token() != 1 {
			t.Errorf("%q: got token %d, want 1 (a fresh counter per name)", name, lock.Token())
		}
		if err := lock.Release(t.Context()); err != nil {
			t.Errorf("%q: Release: %v", name, err)
		}
		seen[name] = true
	}
	if n := keysCount(t, r); n != len(seen) {
		t.Fatalf("got %d fence keys for %d names", n, len(seen))
	}
}

func TestCancelledContextSendsNothing(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	l := newLocker(t, r)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	before := 0
	if r.Mini != nil {
		before = r.Mini.CommandCount()
	}
	for name, call := range map[string]func() error{
		"TryAcquire": func() error { _, err := l.TryAcquire(ctx, "r"); return err },
		"Acquire":    func() error { _, err := l.Acquire(ctx, "r"); return err },
		"Do":         func() error { return l.Do(ctx, "r", func(context.Context) error { return nil }) },
	} {
		err := call()
		if !errors.Is(err, fencing.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
			t.Errorf("%s: got %v, want ErrNotAcquired and context.Canceled", name, err)
		}
	}
	if n := keysCount(t, r); n != 0 {
		t.Fatalf("got %d keys, want 0", n)
	}
	if r.Mini != nil {
		if n := r.Mini.CommandCount() - before; n != 1 { // the KEYS above
			t.Fatalf("got %d commands, want only the test's KEYS", n)
		}
	}
}

func TestAcquireWaitsForRelease(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	l := newLocker(t, r)
	ctx := t.Context()
	held := mustAcquire(t, l, "res")
	got := make(chan *fencing.Lock)
	go func() {
		lock, err := l.Acquire(ctx, "res")
		if err != nil {
			t.Errorf("Acquire: %v", err)
		}
		got <- lock
	}()
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	lock := <-got
	if lock.Token() != held.Token()+1 {
		t.Fatalf("got token %d, want %d", lock.Token(), held.Token()+1)
	}
}

func TestAcquireContextEnds(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	l := newLocker(t, r)
	_ = mustAcquire(t, l, "res")
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	_, err := l.Acquire(ctx, "res")
	if !errors.Is(err, fencing.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want ErrNotAcquired and DeadlineExceeded", err)
	}
	if d, ok := fencing.RetryAfter(err); !ok || d <= 0 {
		t.Fatalf("RetryAfter: got %v %v", d, ok)
	}
}

// TestUnreachableRedis: a single attempt returns the connection error at once; a call that
// waits rides it out as a restart's (see Acquire) until the outage allowance, here shortened,
// runs out, and returns it then; or, when its context ends first, says so and still carries
// the connection error.
func TestUnreachableRedis(t *testing.T) {
	t.Parallel()
	// One dial a command (go-redis dials five times by default, 100ms apart).
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", DisableIdentity: true, MaxRetries: 1, DialerRetries: 1})
	defer c.Close()
	l := fencing.New(c)
	defer l.Close()
	fencing.SetOutageWait(l, 200*time.Millisecond)
	var ne net.Error
	for name, call := range map[string]func(context.Context) error{
		"TryAcquire": func(ctx context.Context) error { _, err := l.TryAcquire(ctx, "r"); return err },
		"Acquire":    func(ctx context.Context) error { _, err := l.Acquire(ctx, "r"); return err },
		"Do":         func(ctx context.Context) error { return l.Do(ctx, "r", func(context.Context) error { return nil }) },
	} {
		// The call must end for the outage, not for its context, however slow the machine.
		ctx, cancel := context.WithCancel(t.Context())
		err := call(ctx)
		if !errors.As(err, &ne) || errors.Is(err, fencing.ErrNotAcquired) || errors.Is(err, context.Canceled) {
			t.Errorf("%s: got %v, want a connection error that is not ErrNotAcquired", name, err)
		}
		cancel()
	}
	short, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	waiting := fencing.New(c)
	defer waiting.Close()
	_, err := waiting.Acquire(short, "r")
	if !errors.As(err, &ne) || !errors.Is(err, fencing.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Acquire whose context ends while it rides out the outage: got %v, want ErrNotAcquired, DeadlineExceeded and the connection error", err)
	}
}

func TestTokenPrecision(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	l := newLocker(t, r)
	ctx := t.Context()
	fence := r.Prefix + "{big}:fence"
	r.Client.Set(ctx, fence, "9007199254740990", 0) // 2^53 - 2
	// Both sides of 2^53, where a Lua number stops holding every integer.
	for _, want := range []int64{9007199254740991, 9007199254740992, 9007199254740993, 9007199254740994} {
		lock := mustAcquire(t, l, "big")
		if lock.Token() != want {
			t.Fatalf("got token %d, want %d", lock.Token(), want)
		}
		_ = lock.Release(ctx)
	}
	r.Client.Set(ctx, fence, "9223372036854775806", 0)
	lock := mustAcquire(t, l, "big")
	if lock.Token() != math.MaxInt64 {
		t.Fatalf("got token %d, want MaxInt64", lock.Token())
	}
	_ = lock.Release(ctx)
	_, err := l.TryAcquire(ctx, "big")
	if err == nil || errors.Is(err, fencing.ErrNotAcquired) {
		t.Fatalf("at the int64 maximum: got %v, want an overflow error", err)
	}
	if n := r.Client.Exists(ctx, r.Prefix+"{big}:lock").Val(); n != 0 {
		t.Fatalf("a failed INCR left a lock without a token")
	}
	if v := r.Client.Get(ctx, fence).Val(); v != "9223372036854775807" {
		t.Fatalf("fence after overflow: got %s", v)
	}
}

func TestScriptFlush(t *testing.T) {
	r := redistest.New(t)
	l := newLocker(t, r)
	ctx := t.Context()
	lock := mustAcquire(t, l, "res")
	if err := r.Client.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := lock.Extend(ctx, time.Minute); err != nil {
		t.Fatalf("Extend after SCRIPT FLUSH: %v", err)
	}
	r.Client.ScriptFlush(ctx)
	if _, err := lock.TTL(ctx); err != nil {
		t.Fatalf("TTL after SCRIPT FLUSH: %v", err)
	}
	r.Client.ScriptFlush(ctx)
	if err := lock.Release(ctx); err != nil {
		t.Fatalf("Release after SCRIPT FLUSH: %v", err)
	}
	r.Client.ScriptFlush(ctx)
	if lock := mustAcquire(t, l, "res"); lock.Token() != 2 {
		t.Fatalf("got token %d, want 2", lock.Token())
	}
}

func TestServerTimeFloor(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	l := newLocker(t, r, fencing.WithServerTimeFloor())
	ctx := t.Context()
	a := mustAcquire(t, l, "res")
	_ = a.Release(ctx)
	now := time.Now().UnixMicro()
	if a.Token() < now-int64(time.Hour/time.Microsecond) || a.Token() > now+int64(time.Hour/time.Microsecond) {
		t.Fatalf("token %d is not near the clock in microseconds (%d)", a.Token(), now)
	}
	// The counter is lost (a restart without persistence): tokens still increase.
	r.Client.Del(ctx, r.Prefix+"{res}:fence")
	b := mustAcquire(t, l, "res")
	if b.Token() <= a.Token() {
		t.Fatalf("after losing the counter: token %d, want above %d", b.Token(), a.Token())
	}
	_ = b.Release(ctx)
	c := mustAcquire(t, l, "res")
	if c.Token() <= b.Token() {
		t.Fatalf("token %d after %d", c.Token(), b.Token())
	}
}

// afterAcquireHook calls fn right after the acquire script has run on the server, before
// its reply reaches the Locker.
type afterAcquireHook struct{ fn func() }

func (h afterAcquireHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h afterAcquireHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h afterAcquireHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if name := cmd.Name(); err == nil && (name == "evalsha" || name == "eval") && len(cmd.Args()) == 3+1+2 {
			h.fn() // one key and two arguments: the acquire script's uncontended attempt
		}
		return err
	}
}

func TestLateReplyCountsAsBusy(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	c := r.NewClient(t)
	const ttl = 10 * time.Millisecond
	c.AddHook(afterAcquireHook{func() { time.Sleep(3 * ttl) }})
	l := fencing.New(c, fencing.WithPrefix(r.Prefix), fencing.WithTTL(ttl))
	defer l.Close()
	lock, err := l.TryAcquire(t.Context(), "res")
	if !errors.Is(err, fencing.ErrNotAcquired) || lock != nil {
		t.Fatalf("got %v, %v; want ErrNotAcquired: the lease may have run out before the reply came", lock, err)
	}
	if !strings.Contains(err.Error(), "replied after the lease could have run out") {
		t.Errorf("error %q does not say why", err)
	}
	if d, ok := fencing.RetryAfter(err); ok {
		t.Errorf("RetryAfter: got %v, want none (nobody else holds the lock)", d)
	}
	if n := r.Client.Exists(context.Background(), r.Prefix+"{res}:lock").Val(); n != 0 {
		t.Fatal("the late acquisition's lock was left in place")
	}
	if v := r.Client.Get(context.Background(), r.Prefix+"{res}:fence").Val(); v != "1" {
		t.Fatalf("fence: got %q, want 1: the script did run", v)
	}
}

func TestAcquireRacingCancellationReleases(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	c := r.NewClient(t)
	ctx, cancel := context.WithCancel(t.Context())
	c.AddHook(afterAcquireHook{cancel})
	l := fencing.New(c, fencing.WithPrefix(r.Prefix))
	defer l.Close()
	_, err := l.Acquire(ctx, "res")
	if !errors.Is(err, fencing.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want ErrNotAcquired and context.Canceled", err)
	}
	if n := r.Client.Exists(context.Background(), r.Prefix+"{res}:lock").Val(); n != 0 {
		t.Fatal("the lock taken as the context ended was leaked")
	}
	if v := r.Client.Get(context.Background(), r.Prefix+"{res}:fence").Val(); v != "1" {
		t.Fatalf("fence: got %q, want 1: the script did run", v)
	}
}

// TestWaitErrorSaysWhatHappened checks that a wait that ran out says how long it waited and
// how many waiters were ahead, and still matches ErrNotAcquired with RetryAfter.
func TestWaitErrorSaysWhatHappened(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	holder, ahead, late := newLocker(t, r), newLocker(t, r), newLocker(t, r)
	_ = mustAcquire(t, holder, "y", fencing.WithTTL(time.Minute))
	first := acquireAsync(t.Context(), ahead, "y", fencing.WithMaxWait(2*time.Second))
	waitFor(t, 5*time.Second, "the first waiter in the queue", func() bool { return queueLen(r, "y") == 1 })
	_, err := late.Acquire(t.Context(), "y", fencing.WithMaxWait(100*time.Millisecond))
	if !errors.Is(err, fencing.ErrNotAcquired) {
		t.Fatalf("got %v, want ErrNotAcquired", err)
	}
	want := regexp.MustCompile(`^fencing: acquire "y": not acquired: held by another owner after waiting [1-9][0-9]{2,}ms, 1 waiter ahead$`)
	if !want.MatchString(err.Error()) {
		t.Errorf("got %q, want %v", err, want)
	}
	if d, ok := fencing.RetryAfter(err); !ok || d <= 0 || d > time.Minute {
		t.Errorf("RetryAfter: %v, %v; want the holder's remaining lease", d, ok)
	}
	if a := <-first; !errors.Is(a.err, fencing.ErrNotAcquired) {
		t.Errorf("first waiter: got %v, want ErrNotAcquired after its wait", a.err)
	}
}

// TestErrorText checks that errors read as one line with one "fencing: " prefix, and still
// match their sentinels and the context's error.
func TestErrorText(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	l := newLocker(t, r)
	lock := mustAcquire(t, l, "r")
	_ = lock.Release(t.Context())
	err := lock.Release(t.Context())
	if got, want := fmt.Sprint(err), `fencing: release "r": not held`; got != want || !errors.Is(err, fencing.ErrNotHeld) {
		t.Errorf("second release: got %q, want %q matching ErrNotHeld", got, want)
	}
	_ = mustAcquire(t, l, "busy")
	// The deadline passes once the waiter is in the queue, however long joining it took.
	ctx := newDeadline(t.Context())
	done := make(chan error, 1)
	go func() {
		_, err := l.Acquire(ctx, "busy")
		done <- err
	}()
	waitFor(t, time.Minute, "the waiter in the queue", func() bool { return fencing.Queued(l) == 1 })
	ctx.pass()
	err = <-done
	if !errors.Is(err, fencing.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire past its deadline: got %v, want ErrNotAcquired and DeadlineExceeded", err)
	}
	want := regexp.MustCompile(`^fencing: acquire "busy": not acquired: held by another owner after waiting [0-9]+ms, first in the queue: context deadline exceeded$`)
	if !want.MatchString(err.Error()) {
		t.Errorf("Acquire past its deadline: got %q, want %v", err, want)
	}
	for _, e := range []error{err, lock.Extend(t.Context(), time.Second), fencing.New(nil).Err()} {
		if s := e.Error(); strings.Count(s, "fencing: ") != 1 || strings.Contains(s, "\n") {
			t.Errorf("%q: want one line with one prefix", s)
		}
	}
}

// deadline is a context whose deadline passes when the test says: then Done is closed and Err
// is context.DeadlineExceeded, as for a context.WithTimeout that ran out.
type deadline struct {
	context.Context
	done chan struct{}
	once sync.Once
}

func newDeadline(parent context.Context) *deadline {
	return &deadline{Context: context.WithoutCancel(parent), done: make(chan struct{})}
}

func (d *deadline) pass()                 { d.once.Do(func() { close(d.done) }) }
func (d *deadline) Done() <-chan struct{} { return d.done }
func (d *deadline) Err() error {
	select {
	case <-d.done:
		return context.DeadlineExceeded
	default:
		return nil
	}
}

// TestLockerErr checks that a Locker reports an unusable configuration up front.
func TestLockerErr(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	for _, tc := range []struct {
		name string
		l    *fencing.Locker
		ok   bool
	}{
		{"valid", fencing.New(r.Client, fencing.WithPrefix(r.Prefix)), true},
		{"nil client", fencing.New(nil), false},
		{"prefix with a brace", fencing.New(r.Client, fencing.WithPrefix("{x}")), false},
		{"ttl of zero", fencing.New(r.Client, fencing.WithPrefix(r.Prefix), fencing.WithTTL(0)), false},
		{"default ttl above the counter expiry", fencing.New(r.Client, fencing.WithPrefix(r.Prefix), fencing.WithCounterExpiry(10*time.Second)), false},
		{"ttl above the counter expiry", fencing.New(r.Client, fencing.WithPrefix(r.Prefix), fencing.WithTTL(5*time.Second), fencing.WithCounterExpiry(time.Second)), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer tc.l.Close()
			err := tc.l.Err()
			if tc.ok != (err == nil) || (err != nil && !errors.Is(err, fencing.ErrInvalid)) {
				t.Fatalf("Err: got %v, want ok=%v or ErrInvalid", err, tc.ok)
			}
			lock, terr := tc.l.TryAcquire(t.Context(), "res")
			if !tc.ok && !errors.Is(terr, fencing.ErrInvalid) {
				t.Fatalf("TryAcquire: got %v, want the same ErrInvalid", terr)
			}
			_ = lock.Release(t.Context())
		})
	}
}
