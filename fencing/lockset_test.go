package fencing_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/internal/testkit/redistest"
)

// keyCount returns how many keys of r's test exist.
func keyCount(t *testing.T, r *redistest.Redis) int {
	t.Helper()
	keys, err := r.Client.Keys(context.Background(), r.Prefix+"*").Result()
	if err != nil {
		t.Fatalf("KEYS: %v", err)
	}
	return len(keys)
}

func lockExists(t *testing.T, r *redistest.Redis, resource string) bool {
	t.Helper()
	return r.Client.Exists(context.Background(), r.Prefix+"{"+resource+"}:lock").Val() == 1
}

func names(set *fencing.LockSet) []string {
	var out []string
	for _, k := range set.Locks() {
		out = append(out, k.Resource())
	}
	return out
}

func TestTryAcquireAllDedupOrderTokens(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	l := newLocker(t, r)
	ctx := t.Context()

	set, err := l.TryAcquireAll(ctx, []string{"m", "b", "z", "b", "a"})
	if err != nil {
		t.Fatalf("TryAcquireAll: %v", err)
	}
	if got, want := names(set), []string{"a", "b", "m", "z"}; !slices.Equal(got, want) {
		t.Fatalf("got locks %v, want %v (deduplicated, by name)", got, want)
	}
	for _, res := range []string{"a", "b", "m", "z"} {
		if tok := set.Token(res); tok != 1 {
			t.Fatalf("Token(%q): got %d, want 1", res, tok)
		}
		if !lockExists(t, r, res) {
			t.Fatalf("lock of %q missing", res)
		}
	}
	if tok := set.Token("other"); tok != 0 {
		t.Fatalf("Token of a resource not in the set: got %d, want 0", tok)
	}
	// The locks are ordinary locks: a single TryAcquire finds them busy.
	if _, err := l.TryAcquire(ctx, "m"); !errors.Is(err, fencing.ErrNotAcquired) {
		t.Fatalf("TryAcquire of a held member: got %v, want ErrNotAcquired", err)
	}
	if err := set.Extend(ctx, time.Minute); err != nil {
		t.Fatalf("Extend: %v", err)
	}
	if ttl := r.Client.PTTL(ctx, r.Prefix+"{z}:lock").Val(); ttl <= fencing.DefaultTTL {
		t.Fatalf("PTTL after Extend(1m): got %v, want above 30s", ttl)
	}
	if err := set.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	for _, res := range []string{"a", "b", "m", "z"} {
		if lockExists(t, r, res) {
			t.Fatalf("lock of %q left after Release", res)
		}
	}
	err = set.Release(ctx)
	if !errors.Is(err, fencing.ErrNotHeld) || !strings.Contains(err.Error(), `"a"`) || !strings.Contains(err.Error(), `"z"`) {
		t.Fatalf("second Release: got %v, want ErrNotHeld naming each resource", err)
	}
	if err := set.Extend(ctx, time.Minute); !errors.Is(err, fencing.ErrNotHeld) {
		t.Fatalf("Extend after Release: got %v, want ErrNotHeld", err)
	}
	again, err := l.TryAcquireAll(ctx, []string{"z", "a"})
	if err != nil {
		t.Fatalf("TryAcquireAll again: %v", err)
	}
	if again.Token("a") != 2 || again.Token("z") != 2 {
		t.Fatalf("got tokens a=%d z=%d, want 2 and 2", again.Token("a"), again.Token("z"))
	}
	if err := again.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	var nilSet *fencing.LockSet
	if err := nilSet.Release(ctx); !errors.Is(err, fencing.ErrNotHeld) {
		t.Fatalf("nil set Release: got %v, want ErrNotHeld", err)
	}
}

func TestTryAcquireAllBusyTakesNothing(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	l := newLocker(t, r)
	ctx := t.Context()
	holder := mustAcquire(t, l, "m")
	defer holder.Release(ctx)

	for _, call := range []struct {
		name string
		run  func() (*fencing.LockSet, error)
	}{
		{"TryAcquireAll", func() (*fencing.LockSet, error) { return l.TryAcquireAll(ctx, []string{"z", "m", "a"}) }},
		{"AcquireAll MaxWait 0", func() (*fencing.LockSet, error) {
			return l.AcquireAll(ctx, []string{"z", "m", "a"}, fencing.WithMaxWait(0))
		}},
	} {
		t.Run(call.name, func(t *testing.T) {
			set, err := call.run()
			if set != nil || !errors.Is(err, fencing.ErrNotAcquired) {
				t.Fatalf("got %v, %v; want nil and ErrNotAcquired", set, err)
			}
			if !strings.Contains(err.Error(), `"m"`) {
				t.Fatalf("error %q does not name the busy resource m", err)
			}
			if d, ok := fencing.RetryAfter(err); !ok || d <= 0 || d > fencing.DefaultTTL {
				t.Fatalf("RetryAfter: got %v %v, want (0, 30s]", d, ok)
			}
			// a, before m in the order, was taken by the script and released again.
			for _, res := range []string{"a", "z"} {
				if lockExists(t, r, res) {
					t.Fatalf("lock of %q left after a busy TryAcquireAll", res)
				}
			}
		})
	}
}

func TestAcquireAllBadInputWritesNothing(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	l := newLocker(t, r)
	ctx := t.Context()
	many := make([]string, fencing.MaxResources+1)
	for i := range many {
		many[i] = fmt.Sprintf("r%d", i)
	}
	enough := append(slices.Clone(many[:fencing.MaxResources]), many[:10]...) // duplicates are fine
	for _, tc := range []struct {
		name      string
		resources []string
	}{
		{"nil", nil},
		{"empty", []string{}},
		{"empty name", []string{"a", ""}},
		{"long name", []string{"a", strings.Repeat("x", fencing.MaxResourceLen+1)}},
		{"too many", many},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := l.TryAcquireAll(ctx, tc.resources); !errors.Is(err, fencing.ErrInvalid) {
				t.Fatalf("TryAcquireAll: got %v, want ErrInvalid", err)
			}
			if _, err := l.AcquireAll(ctx, tc.resources); !errors.Is(err, fencing.ErrInvalid) {
				t.Fatalf("AcquireAll: got %v, want ErrInvalid", err)
			}
			called := false
			if err := l.DoAll(ctx, tc.resources, func(context.Context) error { called = true; return nil }); !errors.Is(err, fencing.ErrInvalid) || called {
				t.Fatalf("DoAll: got %v (fn called %v), want ErrInvalid and no call", err, called)
			}
			if n := keyCount(t, r); n != 0 {
				t.Fatalf("%d keys written, want none", n)
			}
		})
	}
	if err := l.DoAll(ctx, []string{"a"}, nil); !errors.Is(err, fencing.ErrInvalid) {
		t.Fatalf("DoAll with nil fn: got %v, want ErrInvalid", err)
	}
	// A limit is a single resource's (WithLimit): a set refuses it rather than ignore it.
	if _, err := l.TryAcquireAll(ctx, []string{"a", "b"}, fencing.WithLimit(2)); !errors.Is(err, fencing.ErrInvalid) {
		t.Fatalf("TryAcquireAll with WithLimit(2): got %v, want ErrInvalid", err)
	}
	if n := keyCount(t, r); n != 0 {
		t.Fatalf("%d keys written by a set with a limit, want none", n)
	}
	set, err := l.TryAcquireAll(ctx, enough)
	if err != nil {
		t.Fatalf("TryAcquireAll of %d resources with duplicates: %v", len(enough), err)
	}
	if n := len(set.Locks()); n != fencing.MaxResources {
		t.Fatalf("got %d locks, want %d", n, fencing.MaxResources)
	}
	if err := set.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
}

// countingHook counts the commands a client sends, pipelined ones included.
type countingHook struct{ n atomic.Int64 }

func (h *countingHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *countingHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmd)
	}
}
func (h *countingHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(1) // one round trip
		return next(ctx, cmds)
	}
}

func TestTryAcquireAllOneRoundTrip(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	c := r.NewClient(t)
	h := &countingHook{}
	c.AddHook(h)
	l := fencing.New(c, fencing.WithPrefix(r.Prefix))
	defer l.Close()
	ctx := t.Context()
	warm, err := l.TryAcquireAll(ctx, []string{"x", "y"}) // loads the scripts
	if err != nil {
		t.Fatal(err)
	}
	if err := warm.Release(ctx); err != nil {
		t.Fatal(err)
	}
	h.n.Store(0)
	set, err := l.TryAcquireAll(ctx, []string{"b", "a", "c"})
	if err != nil {
		t.Fatal(err)
	}
	if got := h.n.Load(); got != 1 {
		t.Fatalf("uncontended TryAcquireAll of 3: %d round trips, want 1", got)
	}
	h.n.Store(0)
	if err := set.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if got := h.n.Load(); got != 1 {
		t.Fatalf("Release of 3: %d round trips, want 1", got)
	}
}

func TestAcquireAllWaitsThenTakesAll(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	l := newLocker(t, r)
	other := newLocker(t, r)
	ctx := t.Context()
	holder := mustAcquire(t, other, "b")
	got := make(chan error, 1)
	var set *fencing.LockSet
	go func() {
		var err error
		set, err = l.AcquireAll(ctx, []string{"c", "b", "a"}, fencing.WithTTL(time.Second))
		got <- err
	}()
	// a is taken (before b in the order) and held while waiting; c is not touched.
	waitFor(t, 5*time.Second, "a waiter queued for b", func() bool { return fencing.Queued(l) == 1 })
	if !lockExists(t, r, "a") || lockExists(t, r, "c") {
		t.Fatalf("while waiting for b: a held %v (want true), c held %v (want false)", lockExists(t, r, "a"), lockExists(t, r, "c"))
	}
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("AcquireAll: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("AcquireAll did not return after the release")
	}
	if got, want := names(set), []string{"a", "b", "c"}; !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	if set.Token("b") != 2 || set.Token("a") != 1 || set.Token("c") != 1 {
		t.Fatalf("tokens a=%d b=%d c=%d, want 1, 2, 1", set.Token("a"), set.Token("b"), set.Token("c"))
	}
	if err := set.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
}

func TestAcquireAllRenewsWhileWaiting(t *testing.T) {
	t.Parallel()
	if !redistest.Real() {
		t.Skip("needs a real Redis: leases must run out in real time")
	}
	r := redistest.New(t)
	l := newLocker(t, r)
	other := newLocker(t, r)
	ctx := t.Context()
	holder := mustAcquire(t, other, "b", fencing.WithTTL(time.Minute))
	type result struct {
		set *fencing.LockSet
		err error
	}
	got := make(chan result, 1)
	go func() {
		set, err := l.AcquireAll(ctx, []string{"a", "b"}, fencing.WithTTL(3*time.Second))
		got <- result{set, err}
	}()
	// b is held until the set has renewed a, taken first, while it waits: a's TTL goes up.
	a := r.Prefix + "{a}:lock"
	waitFor(t, 10*time.Second, "a taken", func() bool { return r.Client.Exists(ctx, a).Val() == 1 })
	low := r.Client.PTTL(ctx, a).Val()
	waitFor(t, 10*time.Second, "a renewed", func() bool {
		d := r.Client.PTTL(ctx, a).Val()
		defer func() { low = min(low, d) }()
		return d > low
	})
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	res := recv(t, got, 10*time.Second, "AcquireAll")
	if res.err != nil {
		t.Fatalf("AcquireAll: %v", res.err)
	}
	defer res.set.Release(context.Background())
	if tok, err := r.Client.Get(ctx, a).Result(); err != nil || !strings.HasSuffix(tok, ":1") {
		t.Fatalf("a's lock after the wait: %q %v, want still held with token 1", tok, err)
	}
	for _, k := range res.set.Locks() {
		if _, err := k.TTL(ctx); err != nil {
			t.Fatalf("TTL(%s): %v", k.Resource(), err)
		}
	}
}

func TestAcquireAllWaitEndReleasesTaken(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	l := newLocker(t, r)
	other := newLocker(t, r)
	holder := mustAcquire(t, other, "m")
	defer holder.Release(context.Background())

	t.Run("max wait", func(t *testing.T) {
		begin := time.Now()
		set, err := l.AcquireAll(t.Context(), []string{"z", "m", "a"}, fencing.WithMaxWait(150*time.Millisecond))
		if set != nil || !errors.Is(err, fencing.ErrNotAcquired) || errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("got %v, %v; want ErrNotAcquired alone", set, err)
		}
		if el := time.Since(begin); el < 150*time.Millisecond || el > 3*time.Second {
			t.Fatalf("returned after %v, want about 150ms", el)
		}
		if !strings.Contains(err.Error(), `"m"`) {
			t.Fatalf("error %q does not name m", err)
		}
		if d, ok := fencing.RetryAfter(err); !ok || d <= 0 {
			t.Fatalf("RetryAfter: %v %v, want the holder's TTL", d, ok)
		}
		if lockExists(t, r, "a") || lockExists(t, r, "z") {
			t.Fatal("a lock left after the wait ended")
		}
	})
	t.Run("context", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 150*time.Millisecond)
		defer cancel()
		set, err := l.AcquireAll(ctx, []string{"z", "m", "a"})
		if set != nil || !errors.Is(err, fencing.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("got %v, %v; want ErrNotAcquired and DeadlineExceeded", set, err)
		}
		if lockExists(t, r, "a") || lockExists(t, r, "z") {
			t.Fatal("a lock left after the wait ended")
		}
	})
	waitFor(t, 5*time.Second, "the waiters to leave", func() bool { return fencing.Waiters(l) == 0 })
	if n := r.Client.Exists(context.Background(), r.Prefix+"{m}:queue").Val(); n != 0 {
		t.Fatal("an element left in m's queue")
	}
}

func TestAcquireAllDoesNotBargePastSingleWaiters(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	holderL, singleL, setL := newLocker(t, r), newLocker(t, r), newLocker(t, r)
	ctx := t.Context()
	holder := mustAcquire(t, holderL, "b")
	single := make(chan *fencing.Lock, 1)
	go func() {
		k, err := singleL.Acquire(ctx, "b")
		if err != nil {
			t.Errorf("single Acquire: %v", err)
		}
		single <- k
	}()
	waitFor(t, 5*time.Second, "the single waiter queued", func() bool { return fencing.Queued(singleL) == 1 })
	sets := make(chan *fencing.LockSet, 1)
	go func() {
		s, err := setL.AcquireAll(ctx, []string{"a", "b"})
		if err != nil {
			t.Errorf("AcquireAll: %v", err)
		}
		sets <- s
	}()
	waitFor(t, 5*time.Second, "the set waiter queued", func() bool { return fencing.Queued(setL) == 1 })
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	var k *fencing.Lock
	select {
	case k = <-single:
	case s := <-sets:
		t.Fatalf("the set (tokens %v) got b ahead of the single waiter", s.Token("b"))
	case <-time.After(5 * time.Second):
		t.Fatal("nobody got b")
	}
	if k.Token() != 2 {
		t.Fatalf("single waiter's token %d, want 2", k.Token())
	}
	if err := k.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case s := <-sets:
		if s.Token("b") != 3 {
			t.Fatalf("set's token for b %d, want 3", s.Token("b"))
		}
		if err := s.Release(ctx); err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the set did not get b")
	}
}

// TestAcquireAllNoDeadlock runs hundreds of goroutines that lock random sets of overlapping
// resources, listed in random orders (A→B and B→A), and checks mutual exclusion in process.
func TestAcquireAllNoDeadlock(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	lockers := []*fencing.Locker{newLocker(t, r), newLocker(t, r), newLocker(t, r)}
	const workers, resources = 200, 6
	var inUse [resources]atomic.Int32
	var last [resources]atomic.Int64
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	var done atomic.Int32
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := lockers[w%len(lockers)]
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			n := 2 + rng.IntN(2)
			idx := rng.Perm(resources)[:n]
			set := make([]string, n)
			for i, x := range idx {
				set[i] = fmt.Sprintf("acct-%d", x)
			}
			err := l.DoAll(ctx, set, func(ctx context.Context) error {
				for _, x := range idx {
					if inUse[x].Add(1) != 1 {
						return fmt.Errorf("acct-%d held twice", x)
					}
					tok, ok := fencing.TokenFor(ctx, fmt.Sprintf("acct-%d", x))
					if !ok {
						return fmt.Errorf("no token for acct-%d", x)
					}
					if prev := last[x].Swap(tok); prev >= tok {
						return fmt.Errorf("acct-%d: token %d after %d", x, tok, prev)
					}
				}
				time.Sleep(time.Millisecond)
				for _, x := range idx {
					inUse[x].Add(-1)
				}
				return nil
			})
			if err != nil {
				t.Errorf("worker %d (%v): %v", w, set, err)
				return
			}
			done.Add(1)
		}()
	}
	wg.Wait()
	if done.Load() != workers {
		t.Fatalf("%d of %d workers finished", done.Load(), workers)
	}
}

func TestDoAllTokensInContext(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	l := newLocker(t, r)
	ctx := t.Context()
	err := l.Do(ctx, "outer", func(ctx context.Context) error {
		outer, _ := fencing.TokenFromContext(ctx)
		return l.DoAll(ctx, []string{"y", "x"}, func(ctx context.Context) error {
			if _, ok := fencing.TokenFromContext(ctx); ok {
				t.Error("TokenFromContext inside a DoAll of two: got a token, want none")
			}
			for _, res := range []string{"x", "y"} {
				if tok, ok := fencing.TokenFor(ctx, res); !ok || tok != 1 {
					t.Errorf("TokenFor(%q): %d %v, want 1 true", res, tok, ok)
				}
			}
			if tok, ok := fencing.TokenFor(ctx, "outer"); !ok || tok != outer {
				t.Errorf("TokenFor(outer) inside DoAll: %d %v, want %d true", tok, ok, outer)
			}
			if _, ok := fencing.TokenFor(ctx, "z"); ok {
				t.Error("TokenFor of a resource not held: got true")
			}
			return l.DoAll(ctx, []string{"w"}, func(ctx context.Context) error {
				// A DoAll of one inside locks of other resources: no single token.
				if tok, ok := fencing.TokenFromContext(ctx); ok {
					t.Errorf("TokenFromContext inside a DoAll of one nested in others: %d %v, want false", tok, ok)
				}
				if tok, ok := fencing.TokenFor(ctx, "w"); !ok || tok != 1 {
					t.Errorf("TokenFor(w): %d %v, want 1 true", tok, ok)
				}
				return nil
			})
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := fencing.TokenFor(ctx, "x"); ok {
		t.Fatal("caller's context carries a token")
	}
	for _, res := range []string{"outer", "x", "y", "w"} {
		if lockExists(t, r, res) {
			t.Fatalf("%s still locked after DoAll returned", res)
		}
	}
}

func TestDoAllLossCancelsWithCause(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	// The first renewal (a second in) finds b taken, long before a loaded machine could let
	// the lease run out and name another resource.
	l := newLocker(t, r, fencing.WithTTL(3*time.Second))
	ctx := t.Context()
	var cause error
	err := l.DoAll(ctx, []string{"a", "b"}, func(ctx context.Context) error {
		// Another party takes b over: the next renewal finds it gone.
		if err := r.Client.Set(context.Background(), r.Prefix+"{b}:lock", "intruder:9", time.Minute).Err(); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			cause = context.Cause(ctx)
			return ctx.Err()
		case <-time.After(time.Minute):
			return errors.New("work not cancelled")
		}
	})
	if !errors.Is(cause, fencing.ErrNotHeld) || !strings.Contains(cause.Error(), `"b"`) {
		t.Fatalf("cause: got %v, want ErrNotHeld naming b", cause)
	}
	if !errors.Is(err, fencing.ErrNotHeld) {
		t.Fatalf("DoAll: got %v, want ErrNotHeld", err)
	}
	if lockExists(t, r, "a") {
		t.Fatal("a still held after DoAll returned")
	}
	if v := r.Client.Get(ctx, r.Prefix+"{b}:lock").Val(); v != "intruder:9" {
		t.Fatalf("b's lock: got %q, want the intruder's untouched", v)
	}
}

func TestDoAllReleasesOnError(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	l := newLocker(t, r)
	ctx := t.Context()
	want := errors.New("work failed")
	err := l.DoAll(ctx, []string{"a", "b"}, func(context.Context) error { return want })
	if !errors.Is(err, want) || errors.Is(err, fencing.ErrNotHeld) {
		t.Fatalf("got %v, want fn's error alone", err)
	}
	if lockExists(t, r, "a") || lockExists(t, r, "b") {
		t.Fatal("a lock left after DoAll returned")
	}
}

func TestLockSetReleaseAfterOneLockReleased(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	l := newLocker(t, r)
	ctx := t.Context()
	set, err := l.TryAcquireAll(ctx, []string{"a", "b"})
	if err != nil {
		t.Fatal(err)
	}
	if err := set.Locks()[0].Release(ctx); err != nil {
		t.Fatal(err)
	}
	err = set.Release(ctx)
	if !errors.Is(err, fencing.ErrNotHeld) || !strings.Contains(err.Error(), `"a"`) || strings.Contains(err.Error(), `"b"`) {
		t.Fatalf("got %v, want ErrNotHeld for a alone", err)
	}
	if lockExists(t, r, "b") {
		t.Fatal("b still held")
	}
}

func TestSlot(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		key  string
		want uint16
	}{
		{"foo", 12182},         // CLUSTER KEYSLOT foo
		{"123456789", 0x31C3},  // the CRC16/XMODEM check value
		{"x{foo}:lock", 12182}, // the hash tag
	} {
		if got := fencing.Slot(tc.key); got != tc.want {
			t.Errorf("Slot(%q): got %d, want %d", tc.key, got, tc.want)
		}
	}
	if fencing.Slot("{}foo") == fencing.Slot("foo") {
		t.Error("an empty hash tag was used as the tag")
	}
}

func TestTryAcquireAllOnRing(t *testing.T) {
	t.Parallel()
	m1, m2 := miniredis.RunT(t), miniredis.RunT(t)
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": m1.Addr(), "b": m2.Addr()}, DisableIdentity: true})
	defer ring.Close()
	l := fencing.New(ring)
	defer l.Close()
	ctx := t.Context()
	var resources []string
	for i := range 8 {
		resources = append(resources, fmt.Sprintf("r%d", i))
	}
	set, err := l.TryAcquireAll(ctx, resources)
	if err != nil {
		t.Fatalf("TryAcquireAll on a Ring: %v", err)
	}
	if n1, n2 := len(m1.Keys()), len(m2.Keys()); n1 == 0 || n2 == 0 {
		t.Fatalf("keys per shard %d and %d, want the set spread over both", n1, n2)
	}
	if got := names(set); !slices.IsSorted(got) || len(got) != 8 {
		t.Fatalf("got %v, want the 8 by name", got)
	}
	holder, err := l.TryAcquire(ctx, "r9")
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Release(ctx)
	if _, err := l.TryAcquireAll(ctx, []string{"r9", "s"}); !errors.Is(err, fencing.ErrNotAcquired) {
		t.Fatalf("busy on a Ring: got %v", err)
	}
	if err := set.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	for _, m := range []*miniredis.Miniredis{m1, m2} {
		for _, k := range m.Keys() {
			if strings.HasSuffix(k, ":lock") && !strings.Contains(k, "{r9}") {
				t.Fatalf("lock %s left", k)
			}
		}
	}
}

func TestTryAcquireAllTimeFloorAndCounterExpiry(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	l := newLocker(t, r, fencing.WithCounterExpiry(time.Hour))
	ctx := t.Context()
	now := time.Now().UnixMicro()
	set, err := l.TryAcquireAll(ctx, []string{"a", "b"})
	if err != nil {
		t.Fatal(err)
	}
	for _, res := range []string{"a", "b"} {
		// Tokens floored at the server clock in µs (miniredis's is this host's).
		if tok := set.Token(res); tok < now-int64(time.Minute/time.Microsecond) {
			t.Fatalf("%s: token %d, want at least the clock in µs (%d)", res, tok, now)
		}
		if ttl := r.Client.PTTL(ctx, r.Prefix+"{"+res+"}:fence").Val(); ttl <= 0 || ttl > time.Hour {
			t.Fatalf("%s: counter TTL %v, want the hour of WithCounterExpiry", res, ttl)
		}
	}
	if err := set.Release(ctx); err != nil {
		t.Fatal(err)
	}
	again, err := l.TryAcquireAll(ctx, []string{"a", "b"})
	if err != nil {
		t.Fatal(err)
	}
	if again.Token("a") <= set.Token("a") || again.Token("b") <= set.Token("b") {
		t.Fatalf("tokens %d %d after %d %d, want higher", again.Token("a"), again.Token("b"), set.Token("a"), set.Token("b"))
	}
	_ = again.Release(ctx)
}

// pipeCounter counts pipelines and single scripts apart.
type pipeCounter struct{ single, pipes atomic.Int64 }

func (h *pipeCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *pipeCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if n := cmd.Name(); n == "evalsha" || n == "eval" { // not a new connection's setup
			h.single.Add(1)
		}
		return next(ctx, cmd)
	}
}
func (h *pipeCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		defer h.pipes.Add(1) // once the server answered: a renewal counted has happened
		return next(ctx, cmds)
	}
}

func TestDoAllRenewsTogether(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	c := r.NewClient(t)
	h := &pipeCounter{}
	c.AddHook(h)
	// A lease that a loaded machine cannot stall a renewal past (renewals go every third).
	const ttl = 3 * time.Second
	l := fencing.New(c, fencing.WithPrefix(r.Prefix), fencing.WithTTL(ttl))
	defer l.Close()
	ctx := t.Context()
	var single, pipes int64
	err := l.DoAll(ctx, []string{"a", "b", "c"}, func(ctx context.Context) error {
		h.single.Store(0)
		h.pipes.Store(0)
		// Four thirds of the lease pass for the server, a third after each renewal that came
		// after the third before (not after a count of them: a test slowed by a loaded machine
		// would find several done and let the thirds pass together): without renewals the locks
		// would be gone after three.
		for range 4 {
			n := h.pipes.Load()
			waitFor(t, time.Minute, "a renewal", func() bool { return h.pipes.Load() > n || ctx.Err() != nil })
			if ctx.Err() != nil {
				return context.Cause(ctx)
			}
			r.Advance(ttl / 3)
		}
		single, pipes = h.single.Load(), h.pipes.Load()
		for _, res := range []string{"a", "b", "c"} {
			if !lockExists(t, r, res) {
				return fmt.Errorf("%s not held after four thirds of its lease", res)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("DoAll: %v", err)
	}
	// Each renewal is one pipeline of three extensions.
	if pipes < 4 || single != 0 {
		t.Fatalf("while fn ran: %d pipelines and %d single scripts, want at least 4 and 0: the leases renewed together", pipes, single)
	}
}

func TestDoAllLeaseLapsesWhileRenewalsFail(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	if r.Mini == nil {
		t.Skip("uses miniredis SetError")
	}
	l := newLocker(t, r, fencing.WithTTL(300*time.Millisecond))
	var cause error
	var after time.Duration
	err := l.DoAll(t.Context(), []string{"a", "b"}, func(ctx context.Context) error {
		r.Mini.SetError("ERR injected")
		defer r.Mini.SetError("")
		begin := time.Now()
		select {
		case <-ctx.Done():
			cause, after = context.Cause(ctx), time.Since(begin)
		case <-time.After(5 * time.Second):
		}
		return nil
	})
	if !errors.Is(cause, fencing.ErrNotHeld) || !strings.Contains(cause.Error(), `"a"`) {
		t.Fatalf("cause: got %v, want ErrNotHeld naming a (both leases end together: the first in the order)", cause)
	}
	if after > time.Second {
		t.Fatalf("cancelled %v after the renewals began to fail, want within the 300ms lease", after)
	}
	if !errors.Is(err, fencing.ErrNotHeld) {
		t.Fatalf("DoAll: got %v, want ErrNotHeld", err)
	}
}

func TestAcquireAllLosesTakenLockWhileWaiting(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	l := newLocker(t, r)
	other := newLocker(t, r)
	ctx := t.Context()
	holder := mustAcquire(t, other, "b")
	defer holder.Release(ctx)
	got := make(chan error, 1)
	go func() {
		_, err := l.AcquireAll(ctx, []string{"a", "b"}, fencing.WithTTL(3*time.Second))
		got <- err
	}()
	waitFor(t, 5*time.Second, "the set waiting for b", func() bool { return fencing.Queued(l) == 1 })
	// Another party takes a over: the next renewal, within a second, finds it gone.
	if err := r.Client.Set(ctx, r.Prefix+"{a}:lock", "intruder:9", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	var err error
	select {
	case err = <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("AcquireAll still waiting after losing a")
	}
	if !errors.Is(err, fencing.ErrNotAcquired) || !errors.Is(err, fencing.ErrNotHeld) || !strings.Contains(err.Error(), `"a"`) {
		t.Fatalf("got %v, want ErrNotAcquired and ErrNotHeld naming a", err)
	}
	waitFor(t, 5*time.Second, "the waiter to leave b's queue", func() bool { return fencing.Waiters(l) == 0 })
	if v := r.Client.Get(ctx, r.Prefix+"{a}:lock").Val(); v != "intruder:9" {
		t.Fatalf("a's lock: got %q, want the intruder's untouched", v)
	}
}
