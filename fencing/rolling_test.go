package fencing_test

import (
	"context"
	_ "embed"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/internal/testkit/redistest"
	"github.com/fencekit/fencekit/internal/wire"
)

// The scripts of the version before key layout 2 (commit d5a32f9), as its Locker sent them
// (lib.lua pasted in, its constants in front): a rolling deploy runs them beside this
// version's on one server.
var (
	//go:embed testdata/layout1/acquire.lua
	oldAcquireSrc string
	//go:embed testdata/layout1/release.lua
	oldReleaseSrc string
	//go:embed testdata/layout1/extend.lua
	oldExtendSrc string
)

// oldLocker sends the earlier version's scripts, with its arguments, on r's keys.
type oldLocker struct {
	t      *testing.T
	r      *redistest.Redis
	n      int
	leases time.Duration
}

// keys returns the earlier version's KEYS of resource: lock, fence and queue.
func (o *oldLocker) keys(resource string) []string {
	k := wire.For(o.r.Prefix, resource)
	return []string{k.Lock, k.Fence, k.Queue}
}

// acquire runs the earlier acquire of kind ('x', 'shared' or a limit "<n>") and returns its
// token, 0 when it was refused (busy, another kind), or the script's error.
func (o *oldLocker) acquire(resource, kind string) (owner string, token int64, err error) {
	o.n++
	owner = "old" + strconv.Itoa(o.n)
	res, err := o.r.Client.Eval(context.Background(), oldAcquireSrc, o.keys(resource), owner, o.lease(), "P", kind).Result()
	if err != nil {
		return owner, 0, err
	}
	if arr, ok := res.([]any); ok {
		if arr[0] == int64(1) {
			res = arr[1]
		} else {
			return owner, 0, nil
		}
	}
	token, err = strconv.ParseInt(res.(string), 10, 64)
	return owner, token, err
}

// join runs the earlier acquire with a queue element: it takes the resource or queues.
func (o *oldLocker) join(resource, element string) (any, error) {
	entry := o.lease() + ":0:" + strconv.FormatInt(time.Now().UnixMilli(), 10)
	return o.r.Client.Eval(context.Background(), oldAcquireSrc, o.keys(resource), "o"+element, o.lease(), "P", "x", "0", "0", element, entry).Result()
}

// release runs the earlier release of value (its kind kind) and returns its reply.
func (o *oldLocker) release(resource, value, kind string) (any, error) {
	return o.r.Client.Eval(context.Background(), oldReleaseSrc, o.keys(resource), value, "P", kind).Result()
}

func (o *oldLocker) extend(resource, value, kind string) (any, error) {
	return o.r.Client.Eval(context.Background(), oldExtendSrc, o.keys(resource)[:1], value, o.lease(), kind).Result()
}

func (o *oldLocker) lease() string { return strconv.FormatInt(o.leases.Milliseconds(), 10) }

// holders returns the tokens of resource's holders, as this version reads them.
func holdersOf(t *testing.T, l *fencing.Locker, resource string) []int64 {
	t.Helper()
	st, err := l.Inspect(context.Background(), resource)
	if err != nil {
		t.Fatal(err)
	}
	var tokens []int64
	for _, h := range st.Holders {
		tokens = append(tokens, h.Token)
	}
	return tokens
}

// TestRollingDeploy runs the earlier version's scripts and this version's on one server, on
// the same resources: the two never hold a resource at once beyond what its kind admits. An
// exclusive lock (a string, unchanged) and the queue are shared by both versions, a hand-off
// included; a shared or limited lock of one version is a hash the other refuses: this version
// with ErrLayout, the earlier with a script error, both changing nothing.
func TestRollingDeploy(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	setup := func(t *testing.T) (*redistest.Redis, *fencing.Locker, *oldLocker) {
		r := redistest.New(t)
		return r, newLocker(t, r, fencing.WithTTL(time.Minute)), &oldLocker{t: t, r: r, leases: time.Minute}
	}
	busy := func(t *testing.T, what string, err error) {
		t.Helper()
		if !errors.Is(err, fencing.ErrNotAcquired) {
			t.Errorf("%s: got %v, want ErrNotAcquired", what, err)
		}
	}
	refusedOld := func(t *testing.T, what string, token int64, err error) {
		t.Helper()
		if token != 0 {
			t.Errorf("%s: the earlier version took token %d", what, token)
		}
		_ = err // a refusal (busy or another kind) or a script error: either way nothing taken
	}

	t.Run("exclusive", func(t *testing.T) {
		_, l, old := setup(t)
		owner, tok, err := old.acquire("res", "x")
		if err != nil || tok != 1 {
			t.Fatalf("the earlier acquire: %d, %v", tok, err)
		}
		_, err = l.TryAcquire(ctx, "res")
		busy(t, "an exclusive TryAcquire beside the earlier holder", err)
		_, err = l.TryAcquire(ctx, "res", fencing.Shared())
		busy(t, "a shared TryAcquire beside the earlier holder", err)
		if got := holdersOf(t, l, "res"); len(got) != 1 || got[0] != 1 {
			t.Errorf("Inspect: holders %v, want the earlier one's token 1", got)
		}
		if res, err := old.release("res", owner+":1", "x"); err != nil || res != int64(4) {
			t.Fatalf("the earlier release: %v, %v", res, err)
		}
		lock := mustAcquire(t, l, "res")
		if lock.Token() != 2 {
			t.Errorf("after the earlier release: token %d, want 2", lock.Token())
		}
		_, tok, err = old.acquire("res", "x")
		refusedOld(t, "an earlier exclusive acquire beside this version's holder", tok, err)
		_, tok, err = old.acquire("res", "shared")
		refusedOld(t, "an earlier shared acquire beside this version's holder", tok, err)
		if err := lock.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if _, tok, err = old.acquire("res", "x"); err != nil || tok != 3 {
			t.Errorf("the earlier acquire after this version's release: %d, %v; want token 3", tok, err)
		}
	})

	t.Run("hand-off", func(t *testing.T) {
		// An earlier waiter queued behind this version's holder gets the lock from its
		// release, and this version's waiter from the earlier holder's release.
		r, l, old := setup(t)
		lock := mustAcquire(t, l, "res")
		element := "oldlocker.1.60000"
		if res, err := old.join("res", element); err != nil || !strings.HasPrefix(toString(res), "[3") {
			t.Fatalf("the earlier waiter's join: %v, %v; want queued", res, err)
		}
		if err := lock.Release(ctx); err != nil {
			t.Fatal(err)
		}
		k := wire.For(r.Prefix, "res")
		value := element + ":2"
		if got := strings.TrimSuffix(r.Client.Get(ctx, k.Lock).Val(), "+"); got != value {
			t.Fatalf("after the release: the lock is %q, want granted to the earlier waiter, %q", got, value)
		}
		waiting := acquireAsync(t.Context(), l, "res")
		waitFor(t, 5*time.Second, "this version's waiter to queue", func() bool { return fencing.Waiters(l) == 1 })
		if res, err := old.release("res", value, "x"); err != nil || res != int64(4) {
			t.Fatalf("the earlier holder's release: %v, %v; want released", res, err)
		}
		a := <-waiting
		if a.err != nil || a.lock.Token() != 3 {
			t.Fatalf("this version's waiter: %v, %v; want token 3", a.lock, a.err)
		}
		if err := a.lock.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})

	for _, kind := range []struct {
		name string
		old  string
		opts []fencing.CallOption
	}{
		{"shared", "shared", []fencing.CallOption{fencing.Shared()}},
		{"limit 2", "2", []fencing.CallOption{fencing.WithLimit(2)}},
	} {
		t.Run("earlier "+kind.name+" holder", func(t *testing.T) {
			_, l, old := setup(t)
			owner, tok, err := old.acquire("res", kind.old)
			if err != nil || tok != 1 {
				t.Fatalf("the earlier acquire: %d, %v", tok, err)
			}
			for _, call := range []struct {
				what string
				opts []fencing.CallOption
			}{
				{"the same kind", kind.opts},
				{"exclusive", nil},
			} {
				if _, err := l.TryAcquire(ctx, "res", call.opts...); !errors.Is(err, fencing.ErrLayout) {
					t.Errorf("TryAcquire of %s beside the earlier holder: got %v, want ErrLayout", call.what, err)
				}
				wctx, cancel := context.WithTimeout(ctx, time.Minute)
				if _, err := l.Acquire(wctx, "res", call.opts...); !errors.Is(err, fencing.ErrLayout) {
					t.Errorf("Acquire of %s beside the earlier holder: got %v, want ErrLayout at once", call.what, err)
				}
				cancel()
			}
			if err := l.ForceRelease(ctx, "res", 1); !errors.Is(err, fencing.ErrLayout) {
				t.Errorf("ForceRelease of the earlier holder: got %v, want ErrLayout", err)
			}
			if got := holdersOf(t, l, "res"); len(got) != 1 || got[0] != 1 {
				t.Errorf("Inspect: holders %v, want the earlier one's token 1", got)
			}
			// The earlier version goes on: another holder joins, both release.
			owner2, tok2, err := old.acquire("res", kind.old)
			if err != nil || tok2 != 2 {
				t.Fatalf("a second earlier acquire: %d, %v", tok2, err)
			}
			for _, v := range []string{owner + ":1", owner2 + ":2"} {
				if res, err := old.release("res", v, kind.old); err != nil || res != int64(4) {
					t.Fatalf("the earlier release of %s: %v, %v", v, res, err)
				}
			}
			lock := mustAcquire(t, l, "res", kind.opts...)
			if lock.Token() != 3 {
				t.Errorf("after the earlier holders: token %d, want 3", lock.Token())
			}
			_ = lock.Release(ctx)
		})

		t.Run("this version's "+kind.name+" holder", func(t *testing.T) {
			r, l, old := setup(t)
			lock := mustAcquire(t, l, "res", kind.opts...)
			k := wire.For(r.Prefix, "res")
			for _, oldKind := range []string{kind.old, "x", "shared", "3"} {
				_, tok, err := old.acquire("res", oldKind)
				if tok != 0 || err == nil {
					t.Errorf("an earlier acquire of kind %s beside this version's holder: token %d, error %v; want a script error", oldKind, tok, err)
				}
				t.Logf("the earlier acquire of kind %s: %v", oldKind, err)
			}
			if res, err := old.extend("res", "x:1", kind.old); err == nil && res != int64(5) {
				t.Errorf("an earlier extend of a value it does not hold: %v, want not held or an error", res)
			}
			if got := holdersOf(t, l, "res"); len(got) != 1 || got[0] != lock.Token() {
				t.Errorf("Inspect: holders %v, want this version's one", got)
			}
			if n, _ := r.Client.Get(ctx, k.Fence).Int64(); n != lock.Token() {
				t.Errorf("the counter moved to %d beside the holder's %d", n, lock.Token())
			}
			if err := lock.Release(ctx); err != nil {
				t.Fatal(err)
			}
			// The hash outlives its last holder for a while: the earlier version is refused
			// until it expires, and takes the resource then.
			if _, tok, err := old.acquire("res", "x"); tok != 0 || err == nil {
				t.Errorf("an earlier acquire beside the empty hash: token %d, error %v; want a script error", tok, err)
			}
			r.Client.Del(ctx, k.Lock) // as its expiry would
			if _, tok, err := old.acquire("res", kind.old); err != nil || tok != 2 {
				t.Errorf("an earlier acquire after the hash expired: %d, %v; want token 2", tok, err)
			}
		})
	}
}

func toString(v any) string {
	s, _ := redis.NewCmdResult(v, nil).Text()
	if s != "" {
		return s
	}
	if arr, ok := v.([]any); ok && len(arr) > 0 {
		return "[" + strconv.FormatInt(arr[0].(int64), 10)
	}
	return ""
}
