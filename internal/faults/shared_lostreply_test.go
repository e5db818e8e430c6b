package faults_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/internal/testkit/redisproc"
	"github.com/fencekit/fencekit/internal/testkit/redistest"
	"github.com/fencekit/fencekit/internal/wire"
)

// sharedScript matches a request, sent with EVALSHA or EVAL, of a shared call on the resource
// whose lock key is lock: of the acquire script (op "acquire": its ARGV[1] is an owner,
// without ':'), of the acquire script that queues the waiter when the resource is busy ("join":
// with a queue element), or of the release script ("release": its ARGV[1] is a lock value,
// not the "<owner>:" of an undo).
func sharedScript(lock, op string) func([]byte) bool {
	acquire, release := wire.Scripts["shared_acquire.lua"], wire.Scripts["shared_release.lua"]
	return func(p []byte) bool {
		args := respArgs(p)
		// EVALSHA (or EVAL), the digest, one key, then ARGV from args[4]: owner, lease, kind,
		// rules, element... for the acquire script; the value for the release script.
		if len(args) < 5 || (args[0] != "evalsha" && args[0] != "eval") || args[2] != "1" || args[3] != lock {
			return false
		}
		switch op {
		case "release":
			return release.Is(args[1]) && strings.Contains(args[4], ":") && !strings.HasSuffix(args[4], ":")
		case "join":
			return acquire.Is(args[1]) && len(args) >= 9 && args[8] != ""
		}
		return acquire.Is(args[1]) && (len(args) < 9 || args[8] == "")
	}
}

// TestSharedLostReply loses the reply of a shared acquisition and of a shared release on a
// real server (redistest.ReplyDropper: the request runs, the connection breaks before its reply is
// read), with go-redis retrying the request on a new connection (MaxRetries 3) and without
// (MaxRetries -1), on a free resource and beside another shared holder, and once more for
// a release that hands the resource to a writer queued behind:
//
//   - acquire, retried: the retry finds its own holder field and returns the same token:
//     one field, the counter moved once (no token issued twice);
//   - acquire, not retried: the call fails, and before returning frees the field its first
//     run wrote (no holder left behind by nobody); the other holder keeps its own; the token
//     is used up;
//   - release, retried: nil (the release record answers the retry), the field gone, the
//     other holder's kept, a second Release ErrNotHeld;
//   - release, not retried: fencing sends the release once more itself: nil too;
//   - release that grants a queued writer: nil either way, and the writer gets the lock once,
//     with the next token.
func TestSharedLostReply(t *testing.T) {
	redisproc.Require(t)
	t.Parallel()
	s := redisproc.Start(t)
	ctx := context.Background()
	admin := s.Client(t)
	shared := fencing.Shared()
	for _, retries := range []int{3, -1} {
		mode := "retried"
		if retries < 0 {
			mode = "not-retried"
		}
		// dropping returns a Locker whose client loses the reply of the first request that
		// match accepts once armed; its scripts are loaded first, so that the request is the
		// EVALSHA.
		dropping := func(t *testing.T, match func([]byte) bool) (*fencing.Locker, *redistest.ReplyDropper) {
			d := &redistest.ReplyDropper{Match: match}
			l := newLocker(t, s.Client(t, func(o *redis.Options) { o.MaxRetries, o.Dialer = retries, d.Dial }))
			warm, err := l.TryAcquire(ctx, "warm", shared)
			if err != nil {
				t.Fatal(err)
			}
			if err := warm.Release(ctx); err != nil {
				t.Fatal(err)
			}
			return l, d
		}
		for _, beside := range []bool{false, true} {
			where := "alone"
			if beside {
				where = "beside-a-reader"
			}
			t.Run("acquire/"+mode+"/"+where, func(t *testing.T) {
				l, d := dropping(t, sharedScript(lockKey(t, "res"), "acquire"))
				var other *fencing.Lock
				if beside {
					other = mustTry(t, newLocker(t, admin), "res", shared)
				}
				before := fence(t, admin, "res")
				d.Armed.Store(true)
				lock, err := l.TryAcquire(ctx, "res", shared)
				if d.Dropped.Load() != 1 {
					t.Fatalf("the reply was not dropped (TryAcquire: %v)", err)
				}
				if n := fence(t, admin, "res"); n != before+1 {
					t.Errorf("counter %d after the lost reply, want %d: one token issued", n, before+1)
				}
				var want []string
				if other != nil {
					want = append(want, strconv.FormatInt(other.Token(), 10))
				}
				if retries > 0 {
					if err != nil {
						t.Fatalf("TryAcquire: %v, want the lock: the retry finds the field its first run wrote", err)
					}
					if lock.Token() != before+1 {
						t.Errorf("token %d, want %d: the retry returns the first run's token", lock.Token(), before+1)
					}
					want = append(want, strconv.FormatInt(lock.Token(), 10))
				} else if err == nil || lock != nil || errors.Is(err, fencing.ErrNotAcquired) {
					t.Fatalf("TryAcquire: got %v, %v; want the connection's error", lock, err)
				}
				if have := holderTokens(t, admin, lockKey(t, "res")); !slices.Equal(have, want) {
					t.Fatalf("the lock holds tokens %v, want %v", have, want)
				}
				next := mustTry(t, l, "res", shared)
				if next.Token() != before+2 {
					t.Errorf("the next shared token %d, want %d", next.Token(), before+2)
				}
				for _, k := range []*fencing.Lock{lock, next, other} {
					if k != nil {
						if err := k.Release(ctx); err != nil {
							t.Fatal(err)
						}
					}
				}
				if h := holderTokens(t, admin, lockKey(t, "res")); len(h) != 0 {
					t.Fatalf("the lock holds tokens %v after its holders' releases", h)
				}
			})
			t.Run("release/"+mode+"/"+where, func(t *testing.T) {
				l, d := dropping(t, sharedScript(lockKey(t, "res"), "release"))
				var other *fencing.Lock
				if beside {
					other = mustTry(t, newLocker(t, admin), "res", shared)
				}
				lock := mustTry(t, l, "res", shared)
				d.Armed.Store(true)
				err := lock.Release(ctx)
				if d.Dropped.Load() != 1 {
					t.Fatalf("the reply was not dropped (Release: %v)", err)
				}
				if err != nil {
					t.Fatalf("Release: %v, want nil: its first run released the lock", err)
				}
				var want []string
				if other != nil {
					want = append(want, strconv.FormatInt(other.Token(), 10))
				}
				if have := holderTokens(t, admin, lockKey(t, "res")); !slices.Equal(have, want) {
					t.Fatalf("the lock holds tokens %v, want %v", have, want)
				}
				if err := lock.Release(ctx); !errors.Is(err, fencing.ErrNotHeld) {
					t.Errorf("second Release: %v, want ErrNotHeld", err)
				}
				if other != nil {
					if err := other.Release(ctx); err != nil {
						t.Fatal(err)
					}
				}
				if h := holderTokens(t, admin, lockKey(t, "res")); len(h) != 0 {
					t.Fatalf("the lock holds tokens %v after its holders' releases", h)
				}
			})
		}
		t.Run("join/"+mode, func(t *testing.T) {
			// The reply lost is that of the script that queues the shared waiter behind a
			// writer. Retried by go-redis, or sent again by the waiter itself (which rides out
			// a lost reply from its first attempt on), the script finds its element queued
			// (the lock marked, the element near the tail) and queues nothing more: the
			// writer's release grants the waiter.
			l, d := dropping(t, sharedScript(lockKey(t, "res"), "join"))
			writer := mustTry(t, newLocker(t, admin), "res")
			type result struct {
				lock *fencing.Lock
				err  error
			}
			got := make(chan result, 1)
			wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			d.Armed.Store(true)
			go func() {
				r, err := l.Acquire(wctx, "res", shared)
				got <- result{r, err}
			}()
			queue := keyBase(t, "res") + "queue"
			var r result
			waitUntil(t, 10*time.Second, "the reply dropped", func() bool { return d.Dropped.Load() == 1 })
			waitUntil(t, 10*time.Second, "the element queued", func() bool { return admin.LLen(ctx, queue).Val() == 1 })
			if d.Dropped.Load() != 1 {
				t.Fatalf("%d replies dropped, want 1", d.Dropped.Load())
			}
			if n := admin.LLen(ctx, queue).Val(); n != 1 {
				t.Fatalf("queue length %d after the join, want 1: the element once", n)
			}
			if err := writer.Release(ctx); err != nil {
				t.Fatal(err)
			}
			var want []string
			issued := writer.Token()
			{
				if r = <-got; r.err != nil {
					t.Fatalf("Acquire: %v, want the lock", r.err)
				}
				// The element's grant (the writer's token + 1); or, when go-redis's retry of
				// the join ran after the writer's release, the retry's own acquisition beside
				// that grant, which the Locker, whose waiter is gone, released again.
				issued = r.lock.Token()
				if issued != writer.Token()+1 && issued != writer.Token()+2 {
					t.Errorf("token %d, want %d (the element's grant) or %d (the retry's)", issued, writer.Token()+1, writer.Token()+2)
				}
				want = []string{strconv.FormatInt(r.lock.Token(), 10)}
			}
			waitUntil(t, time.Second, "a grant no waiter took passed on", func() bool {
				return slices.Equal(holderTokens(t, admin, lockKey(t, "res")), want)
			})
			if n := fence(t, admin, "res"); n != issued {
				t.Errorf("counter %d, want %d: no token for a copy of the element", n, issued)
			}
			if n := admin.LLen(ctx, queue).Val(); n != 0 {
				t.Errorf("%d elements left in the queue", n)
			}
			counter := fence(t, admin, "res")
			next := mustTry(t, newLocker(t, admin), "res", shared)
			for _, k := range []*fencing.Lock{r.lock, next} {
				if k != nil {
					if err := k.Release(ctx); err != nil {
						t.Fatal(err)
					}
				}
			}
			figure(t, "shared-lost-join-"+mode, "the queueing script's reply lost: Acquire %v; counter %d after the writer's %d",
				errText(r.err), counter, writer.Token())
		})
		t.Run("release-to-writer/"+mode, func(t *testing.T) {
			l, d := dropping(t, sharedScript(lockKey(t, "res"), "release"))
			lock := mustTry(t, l, "res", shared)
			type result struct {
				lock *fencing.Lock
				err  error
			}
			got := make(chan result, 1)
			wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			go func() {
				w, err := newLocker(t, admin).Acquire(wctx, "res")
				got <- result{w, err}
			}()
			waitUntil(t, 10*time.Second, "the writer in the queue", func() bool {
				return admin.LLen(ctx, keyBase(t, "res")+"queue").Val() == 1
			})
			d.Armed.Store(true)
			err := lock.Release(ctx)
			if d.Dropped.Load() != 1 {
				t.Fatalf("the reply was not dropped (Release: %v)", err)
			}
			if err != nil {
				t.Fatalf("Release: %v, want nil: its first run released the lock and granted it", err)
			}
			w := <-got
			if w.err != nil {
				t.Fatalf("the writer: %v", w.err)
			}
			if w.lock.Token() != lock.Token()+1 || fence(t, admin, "res") != lock.Token()+1 {
				t.Errorf("writer token %d, counter %d; want %d and %d: granted once", w.lock.Token(), fence(t, admin, "res"), lock.Token()+1, lock.Token()+1)
			}
			if have := holderTokens(t, admin, lockKey(t, "res")); !slices.Equal(have, []string{strconv.FormatInt(w.lock.Token(), 10)}) {
				t.Errorf("the lock holds %v, want the writer's token %d alone", have, w.lock.Token())
			}
			if err := w.lock.Release(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
	if !t.Failed() {
		figure(t, "shared-lost-replies", "%s, go-redis retrying and not: a lost shared acquire (alone, beside a reader) leaves one holder field with one token or none; a lost shared release returns nil and keeps the other reader; a release that granted a queued writer returns nil and the writer holds once, with the next token", serverName(t, s))
	}
}

// mustTry takes resource with TryAcquire and fails t otherwise.
func mustTry(t *testing.T, l *fencing.Locker, resource string, opts ...fencing.CallOption) *fencing.Lock {
	t.Helper()
	lock, err := l.TryAcquire(context.Background(), resource, opts...)
	if err != nil {
		t.Fatalf("TryAcquire %s: %v", resource, err)
	}
	return lock
}

// fence returns the counter of resource, 0 when it does not exist.
func fence(t *testing.T, c redis.UniversalClient, resource string) int64 {
	t.Helper()
	v, err := c.Get(context.Background(), fenceKey(t, resource)).Result()
	if errors.Is(err, redis.Nil) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return atoi64(v)
}

// errText returns "ok" for nil, the error's text otherwise.
func errText(err error) string {
	if err == nil {
		return "ok"
	}
	return strconv.Quote(err.Error())
}
