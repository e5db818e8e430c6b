package fencing_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/internal/testkit/redistest"
)

// holders returns the fields of a limited resource's hash: its holders and the limit.
// holders returns the hash of a limited (or shared) resource's holders: its field limit and
// one field per holder, without the key's bookkeeping (until, q).
func holders(t *testing.T, r *redistest.Redis, resource string) map[string]string {
	t.Helper()
	m, err := r.Client.HGetAll(context.Background(), r.Prefix+"{"+resource+"}:lock").Result()
	if err != nil {
		t.Fatalf("HGETALL: %v", err)
	}
	// The holders as "<owner>:<token>" => lease end, and the hash's kind as "limit".
	out := map[string]string{}
	for f, v := range m {
		switch {
		case f == "k" && v == "s":
			out["limit"] = "shared"
		case f == "k":
			out["limit"] = strings.TrimPrefix(v, "l")
		case len(f) > 1:
			end, token, _ := strings.Cut(v, ":")
			out[f+":"+token] = end
		}
	}
	return out
}

// dump returns every key under r's prefix but the release records, with its type and content.
func dump(t *testing.T, r *redistest.Redis) string {
	t.Helper()
	ctx := context.Background()
	keys := r.Client.Keys(ctx, r.Prefix+"*").Val()
	slices.Sort(keys)
	var b strings.Builder
	for _, k := range keys {
		if strings.Contains(k, "}:r:") {
			continue
		}
		switch typ := r.Client.Type(ctx, k).Val(); typ {
		case "string":
			fmt.Fprintf(&b, "%s=%s\n", k, r.Client.Get(ctx, k).Val())
		case "hash":
			fmt.Fprintf(&b, "%s=%v\n", k, r.Client.HGetAll(ctx, k).Val())
		case "list":
			fmt.Fprintf(&b, "%s=%v\n", k, r.Client.LRange(ctx, k, 0, -1).Val())
		}
	}
	return b.String()
}

func TestLimitTryAcquire(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	l := newLocker(t, r, fencing.WithLimit(3))
	ctx := t.Context()

	var locks []*fencing.Lock
	for i := range 3 {
		lock := mustAcquire(t, l, "tenant-7")
		if want := int64(i + 1); lock.Token() != want {
			t.Fatalf("holder %d: got token %d, want %d", i, lock.Token(), want)
		}
		locks = append(locks, lock)
	}
	h := holders(t, r, "tenant-7")
	if len(h) != 4 || h["limit"] != "3" {
		t.Fatalf("got hash %v, want the limit 3 and three holders", h)
	}
	_, err := l.TryAcquire(ctx, "tenant-7")
	if !errors.Is(err, fencing.ErrNotAcquired) {
		t.Fatalf("fourth TryAcquire: got %v, want ErrNotAcquired", err)
	}
	if d, ok := fencing.RetryAfter(err); !ok || d <= 0 || d > fencing.DefaultTTL {
		t.Fatalf("RetryAfter: got %v %v, want (0, 30s]", d, ok)
	}
	for _, lock := range locks {
		if d, err := lock.TTL(ctx); err != nil || d <= 0 || d > fencing.DefaultTTL {
			t.Fatalf("TTL of token %d: got %v, %v", lock.Token(), d, err)
		}
	}
	if err := locks[1].Extend(ctx, time.Hour); err != nil {
		t.Fatalf("Extend: %v", err)
	}
	if d, err := locks[1].TTL(ctx); err != nil || d <= fencing.DefaultTTL {
		t.Fatalf("TTL after Extend: got %v, %v, want above 30s", d, err)
	}
	if d := r.Client.PTTL(ctx, r.Prefix+"{tenant-7}:lock").Val(); d <= fencing.DefaultTTL {
		t.Fatalf("the hash's PTTL: got %v, want the latest lease, above 30s", d)
	}
	if d, err := locks[0].TTL(ctx); err != nil || d > fencing.DefaultTTL {
		t.Fatalf("TTL of another holder after Extend: got %v, %v, want its own lease", d, err)
	}

	if err := locks[1].Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if err := locks[1].Release(ctx); !errors.Is(err, fencing.ErrNotHeld) {
		t.Fatalf("second Release: got %v, want ErrNotHeld", err)
	}
	if err := locks[1].Extend(ctx, time.Second); !errors.Is(err, fencing.ErrNotHeld) {
		t.Fatalf("Extend after Release: got %v, want ErrNotHeld", err)
	}
	if _, err := locks[1].TTL(ctx); !errors.Is(err, fencing.ErrNotHeld) {
		t.Fatalf("TTL after Release: got %v, want ErrNotHeld", err)
	}
	next := mustAcquire(t, l, "tenant-7")
	if next.Token() != 4 {
		t.Fatalf("got token %d, want 4", next.Token())
	}
	for _, lock := range []*fencing.Lock{locks[0], locks[2], next} {
		if err := lock.Release(ctx); err != nil {
			t.Fatalf("Release of token %d: %v", lock.Token(), err)
		}
	}
	// The hash outlives its last holder until its expiry (docs/design.md), holding none.
	if st, err := l.Inspect(ctx, "tenant-7"); err != nil || len(st.Holders) != 0 || st.NextToken != 5 {
		t.Fatalf("after the last release: %+v, %v; want no holder and the next token 5:\n%s", st, err, dump(t, r))
	}
	if h := holders(t, r, "tenant-7"); len(h) > 1 {
		t.Fatalf("after the last release: holders %v, want none", h)
	}
}

func TestLimitBadInput(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	l := newLocker(t, r)
	ctx := t.Context()
	held := mustAcquire(t, l, "held", fencing.WithLimit(2))
	defer held.Release(ctx)
	for _, n := range []int{0, -1, fencing.MaxLimit + 1, 1 << 40} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			before := dump(t, r)
			opt := fencing.WithLimit(n)
			for _, resource := range []string{"free", "held"} {
				if _, err := l.TryAcquire(ctx, resource, opt); !errors.Is(err, fencing.ErrInvalid) || !strings.Contains(err.Error(), "limit") {
					t.Errorf("TryAcquire(%s): got %v, want ErrInvalid naming the limit", resource, err)
				}
				if _, err := l.Acquire(ctx, resource, opt); !errors.Is(err, fencing.ErrInvalid) {
					t.Errorf("Acquire(%s): got %v, want ErrInvalid", resource, err)
				}
				called := false
				err := l.Do(ctx, resource, func(context.Context) error { called = true; return nil }, opt)
				if !errors.Is(err, fencing.ErrInvalid) || called {
					t.Errorf("Do(%s): got %v (called %v), want ErrInvalid without calling fn", resource, err, called)
				}
			}
			if err := fencing.New(r.Client, fencing.WithLimit(n)).Err(); !errors.Is(err, fencing.ErrInvalid) {
				t.Errorf("New(WithLimit(%d)).Err(): got %v, want ErrInvalid", n, err)
			}
			if after := dump(t, r); after != before {
				t.Errorf("bad input wrote something:\nbefore\n%s\nafter\n%s", before, after)
			}
		})
	}
	for _, n := range []int{1, 2, fencing.MaxLimit} {
		lock, err := l.TryAcquire(ctx, fmt.Sprint("ok-", n), fencing.WithLimit(n))
		if err != nil {
			t.Fatalf("WithLimit(%d): %v", n, err)
		}
		if err := lock.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

func TestLimitMismatch(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	ctx := t.Context()
	l := newLocker(t, r)
	cases := []struct {
		name      string
		held, ask int
	}{
		{"limited, asked for another limit", 2, 3},
		{"limited, asked for the exclusive lock", 4, 1},
		{"exclusive, asked for a limit", 1, 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resource := strings.ReplaceAll(tc.name, " ", "-")
			held := mustAcquire(t, l, resource, fencing.WithLimit(tc.held))
			before := dump(t, r)
			ask := fencing.WithLimit(tc.ask)
			want := []string{fmt.Sprintf("limit %d", tc.held), fmt.Sprintf("limit %d", tc.ask)}
			check := func(what string, err error) {
				t.Helper()
				if !errors.Is(err, fencing.ErrInvalid) || errors.Is(err, fencing.ErrNotAcquired) {
					t.Fatalf("%s: got %v, want ErrInvalid", what, err)
				}
				for _, w := range want {
					if !strings.Contains(err.Error(), w) {
						t.Fatalf("%s: %q does not name %q", what, err, w)
					}
				}
			}
			_, err := l.TryAcquire(ctx, resource, ask)
			check("TryAcquire", err)
			_, err = l.Acquire(ctx, resource, ask)
			check("Acquire", err)
			check("Do", l.Do(ctx, resource, func(context.Context) error { return nil }, ask))
			if after := dump(t, r); after != before {
				t.Fatalf("a refused call wrote:\nbefore\n%s\nafter\n%s", before, after)
			}
			if err := held.Release(ctx); err != nil {
				t.Fatal(err)
			}
			// Idle: the new limit takes effect.
			var locks []*fencing.Lock
			for range tc.ask {
				locks = append(locks, mustAcquire(t, l, resource, ask))
			}
			if _, err := l.TryAcquire(ctx, resource, ask); !errors.Is(err, fencing.ErrNotAcquired) {
				t.Fatalf("one over the new limit %d: got %v, want ErrNotAcquired", tc.ask, err)
			}
			for _, lock := range locks {
				if err := lock.Release(ctx); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// TestLimitContention runs hundreds of goroutines over several Lockers through Do with
// limit 4 and counts the holders inside: never more than 4, and 4 at some point.
func TestLimitContention(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	r.RealTime(t) // as TestDoContention
	const limit, lockers = 4, 4
	per := 50
	if r.Mini != nil {
		per = 12 // as TestDoContention
	}
	var inside, most, stale atomic.Int32
	var mu sync.Mutex
	var tokens []int64
	var wg sync.WaitGroup
	for range lockers {
		l := process(t, r, fencing.WithLimit(limit))
		for range per {
			wg.Go(func() {
				err := l.Do(t.Context(), "partner-api", func(ctx context.Context) error {
					n := inside.Add(1)
					defer inside.Add(-1)
					for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
					}
					token, _ := fencing.TokenFromContext(ctx)
					mu.Lock()
					if slices.Contains(tokens, token) {
						stale.Add(1)
					}
					tokens = append(tokens, token)
					mu.Unlock()
					time.Sleep(time.Millisecond) // the section
					return nil
				})
				if err != nil {
					t.Errorf("Do: %v", err)
				}
			})
		}
	}
	wg.Wait()
	if got := most.Load(); got > limit {
		t.Fatalf("%d holders at once, want at most %d", got, limit)
	} else if got < 2 {
		t.Fatalf("at most %d holder at once: the limit let nobody in alongside", got)
	}
	if stale.Load() > 0 || len(tokens) != lockers*per {
		t.Fatalf("got %d tokens (%d repeated), want %d distinct", len(tokens), stale.Load(), lockers*per)
	}
	if q := queueLen(r, "partner-api"); q != 0 {
		t.Fatalf("queue left with %d elements", q)
	}
}

// TestLimitFIFO queues waiters of three Lockers behind two holders of limit 2: each freed
// slot goes to the longest waiter, and a newcomer does not take a free slot ahead of them.
func TestLimitFIFO(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	ctx := t.Context()
	opt := fencing.WithLimit(2)
	holder := process(t, r, opt)
	a, b := mustAcquire(t, holder, "res"), mustAcquire(t, holder, "res")
	waiters := []*fencing.Locker{process(t, r, opt, slowBackoff), process(t, r, opt, slowBackoff), process(t, r, opt, slowBackoff)}
	var got []<-chan acquired
	for i, w := range waiters {
		got = append(got, acquireAsync(ctx, w, "res", opt))
		waitFor(t, 5*time.Second, "the waiter in the queue", func() bool { return queueLen(r, "res") == int64(i+1) })
	}
	if _, err := holder.TryAcquire(ctx, "res", opt); !errors.Is(err, fencing.ErrNotAcquired) {
		t.Fatalf("newcomer: got %v, want ErrNotAcquired", err)
	}
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	first := <-got[0]
	if first.err != nil {
		t.Fatal(first.err)
	}
	if first.lock.Token() != 3 {
		t.Fatalf("first waiter: token %d, want 3", first.lock.Token())
	}
	select {
	case g := <-got[1]:
		t.Fatalf("second waiter got a slot with none free: %v %v", g.lock.Token(), g.err)
	default:
	}
	if err := b.Release(ctx); err != nil {
		t.Fatal(err)
	}
	second := <-got[1]
	if second.err != nil || second.lock.Token() != 4 {
		t.Fatalf("second waiter: %v, token %d, want 4", second.err, second.lock.Token())
	}
	if err := first.lock.Release(ctx); err != nil {
		t.Fatal(err)
	}
	third := <-got[2]
	if third.err != nil || third.lock.Token() != 5 {
		t.Fatalf("third waiter: %v, token %d, want 5", third.err, third.lock.Token())
	}
	for _, lock := range []*fencing.Lock{second.lock, third.lock} {
		if err := lock.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// TestLimitKilledHolder leaves a holder's slot unreleased: the waiter takes it once its lease
// runs out, while the other holder keeps its own.
func TestLimitKilledHolder(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	ctx := t.Context()
	opt := fencing.WithLimit(2)
	dead := process(t, r, opt)
	mustAcquire(t, dead, "res", fencing.WithTTL(time.Second)) // never released
	alive := mustAcquire(t, process(t, r, opt), "res")
	waiter := process(t, r, opt)
	got := acquireAsync(ctx, waiter, "res", opt)
	waitFor(t, 5*time.Second, "the waiter in the queue", func() bool { return queueLen(r, "res") == 1 })
	if !redistest.Real() {
		r.Advance(time.Second) // miniredis TTLs; the scripts read the real clock
	}
	g := <-got
	if g.err != nil {
		t.Fatal(g.err)
	}
	if g.lock.Token() != 3 {
		t.Fatalf("waiter: token %d, want 3", g.lock.Token())
	}
	if _, err := alive.TTL(ctx); err != nil {
		t.Fatalf("the live holder lost its slot: %v", err)
	}
	for _, lock := range []*fencing.Lock{alive, g.lock} {
		if err := lock.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// TestLimitLostReplies loses the reply to a limited acquire and to a limited release: no slot
// is left taken by nobody. With go-redis retrying, the acquire's retry finds its own slot and
// returns its token, and the release's retry returns what the first run did (the slot handed
// to the waiter). Without retries, the acquire fails and frees the slot its first run took.
func TestLimitLostReplies(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	if r.Mini != nil {
		t.Skip("miniredis drops a command whose connection closes before the reply; runs with FENCING_REDIS_ADDR")
	}
	ctx := t.Context()
	limit := fencing.WithLimit(2)
	isAcquire := func(p []byte) bool {
		// EVALSHA (or EVAL), the digest, one key and three arguments: a limited attempt.
		return strings.HasPrefix(string(p), "*7\r\n$7\r\nevalsha\r\n") || strings.HasPrefix(string(p), "*7\r\n$4\r\neval\r\n")
	}
	slots := func(resource string) int {
		h := holders(t, r, resource)
		delete(h, "limit")
		return len(h)
	}

	t.Run("acquire/retried", func(t *testing.T) {
		c, armed, dropped := droppingClient(t, r, isAcquire)
		l := fencing.New(c, fencing.WithPrefix(r.Prefix), limit)
		t.Cleanup(func() { _ = l.Close() })
		armed.Store(true)
		lock, err := l.TryAcquire(ctx, "a")
		if dropped.Load() != 1 {
			t.Fatalf("the acquire reply was not dropped (acquire: %v)", err)
		}
		if err != nil {
			t.Fatalf("acquire: %v", err)
		}
		if n := slots("a"); n != 1 || lock.Token() != 1 {
			t.Fatalf("got %d slots taken and token %d, want 1 and 1: %v", n, lock.Token(), holders(t, r, "a"))
		}
		if err := lock.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("acquire/not-retried", func(t *testing.T) {
		c, armed, dropped := droppingClientRetries(t, r, isAcquire, -1)
		l := fencing.New(c, fencing.WithPrefix(r.Prefix), limit)
		t.Cleanup(func() { _ = l.Close() })
		armed.Store(true)
		lock, err := l.TryAcquire(ctx, "b")
		if dropped.Load() != 1 {
			t.Fatalf("the acquire reply was not dropped (acquire: %v)", err)
		}
		if err == nil {
			_ = lock.Release(ctx)
			t.Fatal("acquire succeeded without its reply")
		}
		if n := slots("b"); n != 0 {
			t.Fatalf("got %d slots taken by nobody, want 0: %v", n, holders(t, r, "b"))
		}
	})

	t.Run("release/granted", func(t *testing.T) {
		c, armed, dropped := droppingClient(t, r, nil)
		l := fencing.New(c, fencing.WithPrefix(r.Prefix), limit, slowBackoff)
		t.Cleanup(func() { _ = l.Close() })
		one, two := mustAcquire(t, l, "c"), mustAcquire(t, l, "c")
		waiter := process(t, r, limit, slowBackoff)
		got := acquireAsync(ctx, waiter, "c")
		waitFor(t, 5*time.Second, "the waiter in the queue", func() bool { return queueLen(r, "c") == 1 })
		armed.Store(true)
		err := one.Release(ctx)
		if dropped.Load() != 1 {
			t.Fatalf("the release reply was not dropped (release: %v)", err)
		}
		if err != nil {
			t.Fatalf("release: got %v, want nil: the first run handed the slot on", err)
		}
		a := <-got
		if a.err != nil || a.lock.Token() != 3 {
			t.Fatalf("waiter: %v, token %d, want 3", a.err, a.lock.Token())
		}
		if n := slots("c"); n != 2 {
			t.Fatalf("got %d slots taken, want 2: %v", n, holders(t, r, "c"))
		}
		for _, lock := range []*fencing.Lock{two, a.lock} {
			if err := lock.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if n := slots("c"); n != 0 {
			t.Fatalf("got %d slots taken by nobody, want 0", n)
		}
	})
}

// TestLimitDoLosesOnlyItsOwn runs two Do calls on a resource of limit 2 and deletes one
// holder's field: that Do's work is cancelled with ErrNotHeld, and the other's goes on.
func TestLimitDoLosesOnlyItsOwn(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	c := r.NewClient(t)
	renewals := &countCalls{match: evalsha(fencing.SharedExtendSHA(), 6)} // renewals: with a lease (a TTL read has none)
	c.AddHook(renewals)
	l := fencing.New(c, fencing.WithPrefix(r.Prefix), fencing.WithLimit(2), fencing.WithTTL(2*time.Second))
	t.Cleanup(func() { _ = l.Close() })
	ctx := t.Context()
	type run struct {
		token chan int64
		err   chan error
		stop  chan struct{}
	}
	start := func() run {
		x := run{make(chan int64, 1), make(chan error, 1), make(chan struct{})}
		go func() {
			x.err <- l.Do(ctx, "res", func(ctx context.Context) error {
				token, _ := fencing.TokenFromContext(ctx)
				x.token <- token
				select {
				case <-ctx.Done():
					return context.Cause(ctx)
				case <-x.stop:
					return nil
				}
			})
		}()
		return x
	}
	a, b := start(), start()
	ta, _ := <-a.token, <-b.token
	key := r.Prefix + "{res}:lock"
	for f := range holders(t, r, "res") {
		if strings.HasSuffix(f, ":"+fmt.Sprint(ta)) {
			r.Client.HDel(ctx, key, f[:strings.LastIndexByte(f, ':')])
		}
	}
	select {
	case err := <-a.err:
		if !errors.Is(err, fencing.ErrNotHeld) {
			t.Fatalf("the Do whose slot was deleted: got %v, want ErrNotHeld", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the Do whose slot was deleted is still running")
	}
	// The other goes on renewing its own slot: two renewals more, each finding it held.
	for range 2 {
		last := renewals.n.Load()
		waitFor(t, 10*time.Second, "a renewal of the other holder", func() bool { return renewals.n.Load() > last })
	}
	select {
	case err := <-b.err:
		t.Fatalf("the other Do ended: %v", err)
	default:
	}
	close(b.stop)
	if err := <-b.err; err != nil {
		t.Fatalf("the other Do: %v", err)
	}
}

// countCalls is a go-redis hook that counts the commands that match accepts.
type countCalls struct {
	match func(args []any) bool
	n     atomic.Int64
}

func (*countCalls) DialHook(next redis.DialHook) redis.DialHook { return next }

func (*countCalls) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (c *countCalls) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if c.match(cmd.Args()) {
			c.n.Add(1)
		}
		return next(ctx, cmd)
	}
}
