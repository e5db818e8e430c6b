package fencing_test

import (
	"context"
	"errors"
	"io"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/internal/testkit/redistest"
)

// slowBackoff makes polling as slow as it gets: a queued waiter still polls once a second
// (0.8s at the earliest, with jitter).
var slowBackoff = fencing.WithRetryBackoff(5*time.Second, 10*time.Second)

type acquired struct {
	lock *fencing.Lock
	err  error
	at   time.Time
}

func acquireAsync(ctx context.Context, l *fencing.Locker, resource string, opts ...fencing.CallOption) <-chan acquired {
	ch := make(chan acquired, 1)
	go func() {
		lock, err := l.Acquire(ctx, resource, opts...)
		ch <- acquired{lock, err, time.Now()}
	}()
	return ch
}

func TestWaiterWakesOnRelease(t *testing.T) {
	t.Parallel()
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
		t.Fatalf("waiter took %v after the release, want within %v: neither the grant's announcement nor a poll served it", d, quick)
	}
	if a.lock.Token() != held.Token()+1 {
		t.Fatalf("got token %d, want %d", a.lock.Token(), held.Token()+1)
	}
}

// waitSubscribed waits until someone listens for the grants of resource: on a channel
// <prefix>{resource}:grant... (each waiting Locker has one of its own, see lib.lua).
func waitSubscribed(t *testing.T, r *redistest.Redis, resource string) {
	t.Helper()
	pattern := r.Prefix + "{" + resource + "}:grant*"
	waitFor(t, 2*time.Second, "the subscription", func() bool {
		return len(r.Client.PubSubChannels(context.Background(), pattern).Val()) > 0
	})
}

func TestWaiterWakesOnExpiry(t *testing.T) {
	t.Parallel()
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

// TestHolderCrashTakeover measures, on a real Redis and its clock, how soon after a crashed
// holder's lease ends a waiter of another Locker holds the lock. Nothing announces a lease that
// runs out, but the replies that found the lock held said how much of its lease was left (the
// first attempt's, then each poll's): the waiter checks again as it ends, one round trip after
// the lease's end, rather than at its next poll (at most a second later, ±20% jitter). With a
// 1.5s lease a poll comes before the lease ends and the same holds. A loaded machine can delay
// any round, so the test wants the best round within the bound, which a waiter that waited for
// its next poll misses by 100ms at least with the default back-off (that poll comes 0.8s after
// the first attempt at the earliest, 0.5s after a 300ms lease's end); TestLeaseSeen checks the
// schedule itself, without a clock. It logs the best and the worst round.
func TestHolderCrashTakeover(t *testing.T) {
	t.Parallel()
	if !redistest.Real() {
		t.Skip("needs a real Redis (FENCING_REDIS_ADDR): miniredis moves TTLs only with FastForward")
	}
	const bound = 400 * time.Millisecond // a round trip, with a loaded machine's slack
	for _, tc := range []struct {
		name   string
		lease  time.Duration
		rounds int
		opts   []fencing.Option
	}{
		{"default", 300 * time.Millisecond, 5, nil},
		{"default/polled-before-the-end", 1500 * time.Millisecond, 3, nil},
		{"backoff-max-100ms", 300 * time.Millisecond, 5, []fencing.Option{fencing.WithRetryBackoff(10*time.Millisecond, 100*time.Millisecond)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := redistest.New(t)
			crashed := newLocker(t, r) // its holders never release
			waiter := newLocker(t, r, tc.opts...)
			// serverTime returns the server's clock and the PTTL of resource's lock.
			serverTime := func(resource string) (time.Time, time.Duration) {
				var now *redis.TimeCmd
				var left *redis.DurationCmd
				if _, err := r.Client.Pipelined(t.Context(), func(p redis.Pipeliner) error {
					now, left = p.Time(t.Context()), p.PTTL(t.Context(), r.Prefix+"{"+resource+"}:lock")
					return nil
				}); err != nil {
					t.Fatal(err)
				}
				return now.Val(), left.Val()
			}
			best, worst := time.Duration(math.MaxInt64), time.Duration(0)
			for i := range tc.rounds {
				res := "res" + strconv.Itoa(i)
				held := mustAcquire(t, crashed, res, fencing.WithTTL(tc.lease))
				now, left := serverTime(res)
				ends := now.Add(left) // the lease's end, on the server's clock
				lock, err := waiter.Acquire(t.Context(), res)
				if err != nil {
					t.Fatal(err)
				}
				now, _ = serverTime(res) // at the latest when the waiter took the lock
				after := now.Sub(ends)
				if lock.Token() != held.Token()+1 {
					t.Fatalf("got token %d, want %d", lock.Token(), held.Token()+1)
				}
				if err := lock.Release(t.Context()); err != nil {
					t.Fatal(err)
				}
				best, worst = min(best, after), max(worst, after)
			}
			t.Logf("FIGURE holder-crash %s: lease %v, %d rounds, the waiter held the lock %v to %v after the lease's end (server's clock)",
				tc.name, tc.lease, tc.rounds, best.Round(time.Millisecond), worst.Round(time.Millisecond))
			if best > bound {
				t.Fatalf("the waiter held the lock %v after the lease's end at best, want at most %v", best, bound)
			}
		})
	}
}

// TestWaiterSurvivesLostMessage frees the lock without a release message (as when a message
// is lost or the subscription is down): the back-off still gets the waiter in.
func TestWaiterSurvivesLostMessage(t *testing.T) {
	t.Parallel()
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
	t.Parallel()
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
	t.Parallel()
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
	t.Parallel()
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
	t.Parallel()
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

// failCalls makes the calls of a Locker's client that match fail with err while armed, at
// most times of them (0: no limit), and counts them: Redis then looks, to those calls, as it
// does during a restart or a failover. Everything else, announcements included, goes through.
type failCalls struct {
	match func(args []any) bool
	times int64
	armed atomic.Bool
	err   atomic.Value // error
	n     atomic.Int64
}

func (*failCalls) DialHook(next redis.DialHook) redis.DialHook { return next }

func (*failCalls) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (f *failCalls) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !f.armed.Load() || !f.match(cmd.Args()) {
			return next(ctx, cmd)
		}
		if n := f.n.Add(1); f.times > 0 && n >= f.times {
			f.armed.Store(false)
		}
		err := f.err.Load().(error)
		cmd.SetErr(err)
		return err
	}
}

// replyError returns the error go-redis returns for an error reply of Redis reading msg.
func replyError(t *testing.T, msg string) error {
	t.Helper()
	r := redistest.New(t)
	err := r.Client.Eval(t.Context(), "return redis.error_reply(ARGV[1])", nil, msg).Err()
	if err == nil || err.Error() != msg {
		t.Fatalf("an error reply %q came back as %v", msg, err)
	}
	return err
}

// TestWaiterRidesOutRedisErrors fails a queued waiter's checks with Redis with errors that can
// pass (a restarted Cluster primary's CLUSTERDOWN, a lost connection): the waiter keeps waiting
// and its place, and takes the lock when the holder releases it. An error that cannot pass
// ends the wait at once; so do the context and, after outageWait of failures in a row, the
// errors themselves; each error says what ended the wait.
func TestWaiterRidesOutRedisErrors(t *testing.T) {
	t.Parallel()
	clusterDown := replyError(t, "CLUSTERDOWN The cluster is down")
	noPerm := replyError(t, "NOPERM this user has no permissions to run the 'evalsha' command")
	for _, tc := range []struct {
		name   string
		err    error
		outage time.Duration // SetOutageWait, 0 for the default
		want   string        // "served", "err" (err alone), "ctx" (ErrNotAcquired, ctx and err), "maxwait" (busy and err)
	}{
		{"clusterdown/served", clusterDown, 0, "served"},
		{"eof/served", io.ErrUnexpectedEOF, 0, "served"},
		{"clusterdown/context-ends", clusterDown, 0, "ctx"},
		{"clusterdown/outage-too-long", clusterDown, 1500 * time.Millisecond, "err"},
		{"clusterdown/max-wait-ends", clusterDown, 0, "maxwait"},
		{"noperm/ends-at-once", noPerm, 0, "err"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := redistest.New(t)
			holder := newLocker(t, r)
			_, pollSHA := scripts(t, r)
			f := &failCalls{match: evalsha(pollSHA, 4)}
			f.err.Store(tc.err)
			// Named, so that its subscription's connection can be told apart on a real Redis.
			name := "fencekit-test-waiter-" + strconv.FormatInt(time.Now().UnixNano(), 36)
			waiter := hookedAs(t, r, name, f)
			if tc.outage > 0 {
				fencing.SetOutageWait(waiter, tc.outage)
			}
			held := mustAcquire(t, holder, "res")
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			if tc.want == "maxwait" {
				// Armed before the first check, which comes well within the 4s.
				f.armed.Store(true)
				a := <-acquireAsync(ctx, waiter, "res", fencing.WithMaxWait(4*time.Second))
				if _, busy := fencing.RetryAfter(a.err); !busy || !errors.Is(a.err, tc.err) || errors.Is(a.err, context.DeadlineExceeded) {
					t.Fatalf("got %v, want busy (with a Retry-After) and %v", a.err, tc.err)
				}
				_ = held.Release(t.Context())
				return
			}
			got := acquireAsync(ctx, waiter, "res")
			waitFor(t, 2*time.Second, "the waiter to queue", func() bool { return fencing.Queued(waiter) == 1 })
			waitSubscribed(t, r, "res")
			f.armed.Store(true)
			if tc.want == "err" {
				a := <-got
				if !errors.Is(a.err, tc.err) || errors.Is(a.err, fencing.ErrNotAcquired) {
					t.Fatalf("got %v, want %v alone", a.err, tc.err)
				}
				if n := f.n.Load(); tc.outage == 0 && n != 1 {
					t.Fatalf("the wait ended after %d failed checks, want 1: %v cannot pass", n, tc.err)
				}
				waitFor(t, 2*time.Second, "the queue to empty", func() bool { return queueLen(r, "res") == 0 })
				_ = held.Release(t.Context())
				return
			}
			if tc.want == "ctx" {
				waitFor(t, 10*time.Second, "two failed checks", func() bool {
					return f.n.Load() >= 2 || fencing.Waiters(waiter) == 0 // or the wait ended
				})
				cancel()
				a := <-got
				if !errors.Is(a.err, fencing.ErrNotAcquired) || !errors.Is(a.err, context.Canceled) || !errors.Is(a.err, tc.err) {
					t.Fatalf("got %v, want ErrNotAcquired, the context's end and %v", a.err, tc.err)
				}
				_ = held.Release(t.Context())
				return
			}
			waitFor(t, 10*time.Second, "three failed checks", func() bool {
				return f.n.Load() >= 3 || fencing.Waiters(waiter) == 0 // or the wait ended
			})
			select {
			case a := <-got:
				t.Fatalf("the wait ended while Redis failed: %v, %v", a.lock, a.err)
			default:
			}
			if n := queueLen(r, "res"); n != 1 {
				t.Fatalf("queue holds %d elements while the checks fail, want the waiter's 1", n)
			}
			sub := ""
			if r.Mini == nil {
				waitFor(t, 10*time.Second, "the waiter's subscribed connection", func() bool {
					sub = subscriber(t, r, name)
					return sub != ""
				})
			}
			released := time.Now()
			if err := held.Release(t.Context()); err != nil {
				t.Fatal(err)
			}
			// The announcement is the only way to the grant while every poll fails, unless the
			// waiter's subscription lost its connection (a loaded machine can starve its reader
			// past three pings): a grant announced then is heard by nobody, and the waiter's poll
			// on the new connection's confirmation would find it. Then the polls work again.
			a, replaced := acquired{}, false
			for done := false; !done; {
				select {
				case a = <-got:
					done = true
				case <-time.After(50 * time.Millisecond):
					if !replaced && sub != "" && subscriber(t, r, name) != sub {
						replaced = true
						f.armed.Store(false)
						t.Logf("the waiter's subscription lost its connection after the release: its polls work again")
					}
				}
			}
			if a.err != nil {
				t.Fatalf("after the release: %v", a.err)
			}
			defer func() { _ = a.lock.Release(context.Background()) }()
			if d := a.at.Sub(released); d > quick && !replaced {
				t.Fatalf("served %v after the release, want within %v (every poll fails: from the grant's announcement)", d, quick)
			}
			if a.lock.Token() != held.Token()+1 {
				t.Fatalf("got token %d, want %d", a.lock.Token(), held.Token()+1)
			}
		})
	}
}

// subscriber returns the id of the connection of the client named name that is subscribed
// to a channel, or "" (always on miniredis).
func subscriber(t *testing.T, r *redistest.Redis, name string) string {
	t.Helper()
	if r.Mini != nil {
		return ""
	}
	list, err := r.Client.ClientList(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(list, "\n") {
		f := map[string]string{}
		for _, kv := range strings.Fields(line) {
			k, v, _ := strings.Cut(kv, "=")
			f[k] = v
		}
		if f["name"] == name && f["sub"] != "" && f["sub"] != "0" {
			return f["id"]
		}
	}
	return ""
}

// TestGrantExtensionRidesOutRedisErrors fails the extension of a grant's short lease (3s) to
// the TTL, which a Lock taken from the queue by Acquire makes a third of the way into the
// lease, off the hand-off path, twice with CLUSTERDOWN: the Lock tries again while the lease
// lasts, and the lock ends up with the Locker's TTL.
func TestGrantExtensionRidesOutRedisErrors(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	holder := newLocker(t, r)
	f := &failCalls{match: evalsha(fencing.ExtendSHA(), 6), times: 2}
	f.err.Store(replyError(t, "CLUSTERDOWN The cluster is down"))
	waiter := hooked(t, r, f)
	held := mustAcquire(t, holder, "res")
	got := acquireAsync(t.Context(), waiter, "res")
	waitFor(t, 2*time.Second, "the waiter to queue", func() bool { return fencing.Queued(waiter) == 1 })
	waitSubscribed(t, r, "res")
	f.armed.Store(true)
	if err := held.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	a := <-got
	if a.err != nil {
		t.Fatalf("Acquire: %v", a.err)
	}
	defer func() { _ = a.lock.Release(context.Background()) }()
	if a.lock.Token() != held.Token()+1 {
		t.Fatalf("got token %d, want %d", a.lock.Token(), held.Token()+1)
	}
	if ttl, err := a.lock.TTL(t.Context()); err != nil || ttl > 3*time.Second {
		t.Fatalf("TTL %v, %v right after the hand-off: want the grant's lease, 3s at most", ttl, err)
	}
	waitFor(t, 3*time.Second, "the lease extended to the TTL", func() bool {
		ttl, err := a.lock.TTL(t.Context())
		return err == nil && ttl > 3*time.Second
	})
	if n := f.n.Load(); n != 2 {
		t.Fatalf("%d extensions failed, want 2", n)
	}
}

// TestRetryAfterWhenReturned: a busy error's RetryAfter is the holders' lease left when the
// error is returned: after a wait, and for a Locker that already waits on the resource (and so
// makes no first attempt), within a second of the lease read from Redis right after it.
func TestRetryAfterWhenReturned(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	holders, waiters := newLocker(t, r), newLocker(t, r)
	const lease = 3 * time.Second
	held := mustAcquire(t, holders, "res", fencing.WithTTL(lease))
	check := func(what string, err error) {
		t.Helper()
		left, perr := held.TTL(context.Background())
		if perr != nil {
			t.Fatal(perr)
		}
		d, busy := fencing.RetryAfter(err)
		if !busy || !errors.Is(err, fencing.ErrNotAcquired) {
			t.Fatalf("%s: got %v, want a busy error", what, err)
		}
		if gap := d - left; gap < 0 || gap > time.Second {
			t.Errorf("%s: RetryAfter %v with the holder's lease at %v, want it within a second above", what, d, left)
		}
	}
	// After a wait, on real Redis a wait the lease visibly shortens over.
	wait := 100 * time.Millisecond
	if redistest.Real() {
		wait = 1500 * time.Millisecond
	}
	_, err := waiters.Acquire(t.Context(), "res", fencing.WithMaxWait(wait))
	check("after a wait", err)

	// A Locker that already waits on the resource.
	ctx, cancel := context.WithCancel(t.Context())
	long := acquireAsync(ctx, waiters, "res")
	waitFor(t, 5*time.Second, "the long wait to queue", func() bool { return fencing.Waiters(waiters) == 1 })
	for i := range 3 {
		if err := held.Extend(t.Context(), lease); err != nil {
			t.Fatal(err)
		}
		_, err := waiters.Acquire(t.Context(), "res", fencing.WithMaxWait(100*time.Millisecond))
		check("a Locker that waits already, call "+strconv.Itoa(i+1), err)
	}
	cancel()
	if a := <-long; !errors.Is(a.err, context.Canceled) {
		t.Fatalf("the long wait: got %v, want context.Canceled", a.err)
	}
}

// TestRetryAfterBesideHolders: the RetryAfter of a wait that ends behind shared or limited
// holders is read from the live holders when it ends: the latest lease of the readers still
// holding (not of one that released), the earliest of full slots.
func TestRetryAfterBesideHolders(t *testing.T) {
	t.Parallel()
	for _, kind := range []struct {
		name       string
		opts, wait []fencing.CallOption
		want       time.Duration // the lease left that RetryAfter must be within a second above
	}{
		{"shared", []fencing.CallOption{fencing.Shared()}, nil, 5 * time.Second},
		{"limit 2", []fencing.CallOption{fencing.WithLimit(2)}, []fencing.CallOption{fencing.WithLimit(2)}, 5 * time.Second},
	} {
		t.Run(kind.name, func(t *testing.T) {
			r := redistest.New(t)
			holders, waiters := newLocker(t, r), newLocker(t, r)
			long := mustAcquire(t, holders, "res", append(kind.opts, fencing.WithTTL(time.Minute))...)
			short := mustAcquire(t, holders, "res", append(kind.opts, fencing.WithTTL(5*time.Second))...)
			defer short.Release(context.Background())
			if kind.name == "shared" {
				// The reader with the long lease leaves: the writer waits for the short one.
				if err := long.Release(t.Context()); err != nil {
					t.Fatal(err)
				}
			} else {
				defer long.Release(context.Background())
			}
			_, err := waiters.Acquire(t.Context(), "res", append(kind.wait, fencing.WithMaxWait(100*time.Millisecond))...)
			d, busy := fencing.RetryAfter(err)
			left, lerr := short.TTL(context.Background())
			if !busy || lerr != nil {
				t.Fatalf("got %v (TTL: %v), want a busy error", err, lerr)
			}
			if gap := d - left; gap < 0 || gap > time.Second {
				t.Errorf("RetryAfter %v with the short holder's lease at %v, want it within a second above", d, left)
			}
		})
	}
}
