package errorstest

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/fencing/fencingtest"
	"github.com/fencekit/fencekit/fencing/observe"
	"github.com/fencekit/fencekit/store"
)

const core = "fencing: "

// A verb is one of the Locker's calls that take locks, as the matrix calls it: on resource,
// or for a call on a set on resource and "<resource>+", releasing what it took.
type verb struct {
	name  string
	waits bool // it waits for a busy resource, unless fencing.WithMaxWait says otherwise
	lead  bool // Lead: it retries what is not the caller's fault, and returns only when told
	call  func(ctx context.Context, l *fencing.Locker, resource string, opts ...fencing.CallOption) error
}

func set(resource string) []string { return []string{resource, resource + "+"} }

var verbs = []verb{
	{name: "TryAcquire", call: func(ctx context.Context, l *fencing.Locker, r string, opts ...fencing.CallOption) error {
		k, err := l.TryAcquire(ctx, r, opts...)
		if err == nil {
			_ = k.Release(context.Background())
		}
		return err
	}},
	{name: "Acquire", waits: true, call: func(ctx context.Context, l *fencing.Locker, r string, opts ...fencing.CallOption) error {
		k, err := l.Acquire(ctx, r, opts...)
		if err == nil {
			_ = k.Release(context.Background())
		}
		return err
	}},
	{name: "Do", waits: true, call: func(ctx context.Context, l *fencing.Locker, r string, opts ...fencing.CallOption) error {
		return l.Do(ctx, r, noop, opts...)
	}},
	{name: "DoAll", waits: true, call: func(ctx context.Context, l *fencing.Locker, r string, opts ...fencing.CallOption) error {
		return l.DoAll(ctx, set(r), noop, opts...)
	}},
	{name: "TryAcquireAll", call: func(ctx context.Context, l *fencing.Locker, r string, opts ...fencing.CallOption) error {
		s, err := l.TryAcquireAll(ctx, set(r), opts...)
		if err == nil {
			_ = s.Release(context.Background())
		}
		return err
	}},
	{name: "AcquireAll", waits: true, call: func(ctx context.Context, l *fencing.Locker, r string, opts ...fencing.CallOption) error {
		s, err := l.AcquireAll(ctx, set(r), opts...)
		if err == nil {
			_ = s.Release(context.Background())
		}
		return err
	}},
	{name: "Lead", lead: true, call: func(ctx context.Context, l *fencing.Locker, r string, opts ...fencing.CallOption) error {
		return l.Lead(ctx, r, noop, opts...) // a term that returns nil resigns, and Lead returns nil
	}},
}

// verbCases are the errors every verb returns: invalid input, a closed Locker, and for the
// verbs that report them, a busy resource and an acquisition that no replica acknowledged.
func verbCases() []errCase {
	var cases []errCase
	for _, v := range verbs {
		name := "fencing.Locker." + v.name + "/"
		cases = append(cases,
			errCase{name + "ErrInvalid/name", core, []error{fencing.ErrInvalid}, func(t *testing.T) error {
				return v.call(t.Context(), newEnv(t).locker, "")
			}},
			errCase{name + "ErrInvalid/option", core, []error{fencing.ErrInvalid}, func(t *testing.T) error {
				return v.call(t.Context(), newEnv(t).locker, "r", fencing.WithTTL(-time.Second))
			}},
			errCase{name + "ErrInvalid/label", core, []error{fencing.ErrInvalid}, func(t *testing.T) error {
				return v.call(t.Context(), newEnv(t).locker, "r", fencing.WithLabel("a\nb"))
			}},
			errCase{name + "ErrInvalid/locker", core, []error{fencing.ErrInvalid}, func(t *testing.T) error {
				return v.call(t.Context(), fencing.New(nil), "r")
			}},
			errCase{name + "ErrInvalid/prefix", core, []error{fencing.ErrInvalid}, func(t *testing.T) error {
				return v.call(t.Context(), newEnv(t, fencing.WithPrefix("{x}")).locker, "r")
			}},
			errCase{name + "ErrClosed", core, []error{fencing.ErrClosed}, func(t *testing.T) error {
				return v.call(t.Context(), newEnv(t).closed(t), "r")
			}},
		)
		if v.lead {
			continue
		}
		cases = append(cases,
			errCase{name + "ErrNotAcquired", core, []error{fencing.ErrNotAcquired}, func(t *testing.T) error {
				e := newEnv(t)
				e.hold(t, "r")
				return v.call(t.Context(), e.locker, "r", fencing.WithMaxWait(0))
			}},
			errCase{name + "ErrNotReplicated", core, []error{fencing.ErrNotReplicated}, func(t *testing.T) error {
				return v.call(t.Context(), newEnv(t).locker, "r", fencing.WithReplicas(1, 20*time.Millisecond))
			}},
		)
		if !v.waits {
			continue
		}
		cases = append(cases,
			errCase{name + "ErrNotAcquired/deadline", core, []error{fencing.ErrNotAcquired, context.DeadlineExceeded}, func(t *testing.T) error {
				e := newEnv(t)
				e.hold(t, "r")
				// The holder keeps the lock past the deadline: only the deadline ends the wait.
				ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
				defer cancel()
				return v.call(ctx, e.locker, "r")
			}},
			errCase{name + "ErrNotAcquired/max-wait", core, []error{fencing.ErrNotAcquired}, func(t *testing.T) error {
				e := newEnv(t)
				e.hold(t, "r")
				return v.call(t.Context(), e.locker, "r", fencing.WithMaxWait(100*time.Millisecond))
			}},
			errCase{name + "ErrClosed/waiting", core, []error{fencing.ErrClosed}, func(t *testing.T) error {
				e := newEnv(t)
				e.hold(t, "r")
				started := make(chan struct{}, 1)
				l := e.newLocker(t, fencing.WithHooks(observe.Hooks{Start: func(ctx context.Context, _ observe.Op, _ string) context.Context {
					select {
					case started <- struct{}{}:
					default:
					}
					return ctx
				}}))
				errc := make(chan error, 1)
				go func() { errc <- v.call(t.Context(), l, "r") }()
				<-started
				_ = l.Close()
				return <-errc
			}},
		)
	}
	return cases
}

// layout1 writes resource's lock as a process of a fencekit version before v0.1.0 holds it
// shared (key layout 1), for a while.
func (e *env) layout1(t *testing.T, resource string) {
	t.Helper()
	ctx := context.Background()
	key := e.key(resource)
	if err := e.r.Client.HSet(ctx, key, "limit", "shared", "until", "9999999999999", "own:1", "9999999999999").Err(); err != nil {
		t.Fatal(err)
	}
	if err := e.r.Client.Expire(ctx, key, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
}

// coreCases are the errors of the Locker's other calls, of Lock and LockSet, and the
// sentinels that only some calls return.
func coreCases() []errCase {
	notHeld := []error{fencing.ErrNotHeld}
	noLock := []error{fencing.ErrNotHeld, fencing.ErrInvalid}
	invalid := []error{fencing.ErrInvalid}
	busy := []error{fencing.ErrNotAcquired}
	layout := []error{fencing.ErrLayout}
	var nilLock *fencing.Lock
	var nilSet *fencing.LockSet
	memo := fencing.Memo{Name: "done", Value: "42", TTL: time.Minute}

	// released returns a lock of resource that was released.
	released := func(t *testing.T, e *env) *fencing.Lock {
		k, err := e.locker.TryAcquire(t.Context(), "r")
		if err != nil {
			t.Fatal(err)
		}
		if err := k.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
		return k
	}
	releasedSet := func(t *testing.T, e *env) *fencing.LockSet {
		s, err := e.locker.TryAcquireAll(t.Context(), []string{"a", "b"})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
		return s
	}
	// memoLeft leaves resource's memo "done".
	memoLeft := func(t *testing.T, e *env) {
		k, err := e.other.TryAcquire(t.Context(), "r")
		if err != nil {
			t.Fatal(err)
		}
		if err := k.ReleaseWith(t.Context(), memo); err != nil {
			t.Fatal(err)
		}
	}

	return []errCase{
		// Busy, in the ways that are not the matrix's.
		{"fencing.Locker.TryAcquire/ErrNotAcquired/shared", core, busy, func(t *testing.T) error {
			e := newEnv(t)
			e.hold(t, "r")
			_, err := e.locker.TryAcquire(t.Context(), "r", fencing.Shared())
			return err
		}},
		{"fencing.Locker.TryAcquire/ErrNotAcquired/limit", core, busy, func(t *testing.T) error {
			e := newEnv(t)
			e.hold(t, "r", fencing.WithLimit(2))
			e.hold(t, "r", fencing.WithLimit(2))
			_, err := e.locker.TryAcquire(t.Context(), "r", fencing.WithLimit(2))
			return err
		}},
		{"fencing.Locker.TryAcquire/ErrNotAcquired/MemoError", core, busy, func(t *testing.T) error {
			e := newEnv(t)
			memoLeft(t, e)
			_, err := e.locker.TryAcquire(t.Context(), "r", fencing.UnlessMemo("done"))
			var m *fencing.MemoError
			if !errors.As(err, &m) || m.Value != "42" {
				t.Errorf("got %v, want a *MemoError with the memo's value", err)
			}
			return err
		}},
		{"fencing.Locker.Do/ErrNotAcquired/MemoError", core, busy, func(t *testing.T) error {
			e := newEnv(t)
			memoLeft(t, e)
			return e.locker.Do(t.Context(), "r", noop, fencing.UnlessMemo("done"))
		}},
		{"fencing.Locker.AcquireAll/ErrNotAcquired+ErrNotHeld", core, []error{fencing.ErrNotAcquired, fencing.ErrNotHeld}, func(t *testing.T) error {
			// AcquireAll takes "a", waits for "b" and renews "a" meanwhile; "a" is dropped,
			// and the renewal finds it gone.
			e := newEnv(t)
			e.hold(t, "b")
			errc := make(chan error, 1)
			go func() {
				s, err := e.locker.AcquireAll(t.Context(), []string{"a", "b"}, shortLease)
				if err == nil {
					_ = s.Release(context.Background())
				}
				errc <- err
			}()
			e.waitHeld(t, "a")
			e.drop(t, "a")
			return <-errc
		}},

		// A lock that is no longer held, and no lock at all.
		{"fencing.Lock.Release/ErrNotHeld", core, notHeld, func(t *testing.T) error {
			return released(t, newEnv(t)).Release(t.Context())
		}},
		{"fencing.Lock.Extend/ErrNotHeld", core, notHeld, func(t *testing.T) error {
			return released(t, newEnv(t)).Extend(t.Context(), time.Minute)
		}},
		{"fencing.Lock.TTL/ErrNotHeld", core, notHeld, func(t *testing.T) error {
			_, err := released(t, newEnv(t)).TTL(t.Context())
			return err
		}},
		{"fencing.Lock.ReleaseWith/ErrNotHeld", core, notHeld, func(t *testing.T) error {
			return released(t, newEnv(t)).ReleaseWith(t.Context(), memo)
		}},
		{"fencing.Lock.Release/ErrNotHeld/force-released", core, notHeld, func(t *testing.T) error {
			e := newEnv(t)
			k, err := e.locker.TryAcquire(t.Context(), "r")
			if err != nil {
				t.Fatal(err)
			}
			if err := e.other.ForceRelease(t.Context(), "r", k.Token()); err != nil {
				t.Fatal(err)
			}
			return k.Release(t.Context())
		}},
		{"fencing.Lock.Release/ErrNotHeld+ErrInvalid/nil", core, noLock, func(t *testing.T) error {
			return nilLock.Release(t.Context())
		}},
		{"fencing.Lock.Extend/ErrNotHeld+ErrInvalid/nil", core, noLock, func(t *testing.T) error {
			return nilLock.Extend(t.Context(), time.Minute)
		}},
		{"fencing.Lock.TTL/ErrNotHeld+ErrInvalid/nil", core, noLock, func(t *testing.T) error {
			_, err := nilLock.TTL(t.Context())
			return err
		}},
		{"fencing.Lock.ReleaseWith/ErrNotHeld+ErrInvalid/nil", core, noLock, func(t *testing.T) error {
			return nilLock.ReleaseWith(t.Context(), memo)
		}},
		{"fencing.Lock.Release/ErrNotHeld+ErrInvalid/zero", core, noLock, func(t *testing.T) error {
			return new(fencing.Lock).Release(t.Context())
		}},
		{"fencing.Lock.Extend/ErrInvalid", core, invalid, func(t *testing.T) error {
			e := newEnv(t)
			k, err := e.locker.TryAcquire(t.Context(), "r")
			if err != nil {
				t.Fatal(err)
			}
			defer k.Release(context.Background())
			return k.Extend(t.Context(), 0)
		}},
		{"fencing.Lock.ReleaseWith/ErrInvalid", core, invalid, func(t *testing.T) error {
			e := newEnv(t)
			k, err := e.locker.TryAcquire(t.Context(), "r")
			if err != nil {
				t.Fatal(err)
			}
			defer k.Release(context.Background())
			return k.ReleaseWith(t.Context(), fencing.Memo{Name: "lock", Value: "x", TTL: time.Minute})
		}},
		{"fencing.Lock.ReleaseWith/ErrInvalid/expire-counter", core, invalid, func(t *testing.T) error {
			e := newEnv(t)
			k, err := e.locker.TryAcquire(t.Context(), "r")
			if err != nil {
				t.Fatal(err)
			}
			defer k.Release(context.Background())
			return k.ReleaseWith(t.Context(), fencing.Memo{Name: "done", Value: "x", TTL: time.Minute, ExpireCounter: true})
		}},
		{"fencing.LockSet.Release/ErrNotHeld", core, notHeld, func(t *testing.T) error {
			return releasedSet(t, newEnv(t)).Release(t.Context()) // one line per resource
		}},
		{"fencing.LockSet.Extend/ErrNotHeld", core, notHeld, func(t *testing.T) error {
			return releasedSet(t, newEnv(t)).Extend(t.Context(), time.Minute)
		}},
		{"fencing.LockSet.Release/ErrNotHeld/one", core, notHeld, func(t *testing.T) error {
			e := newEnv(t)
			s, err := e.locker.TryAcquireAll(t.Context(), []string{"a", "b"})
			if err != nil {
				t.Fatal(err)
			}
			if err := e.other.ForceRelease(t.Context(), "a", s.Token("a")); err != nil {
				t.Fatal(err)
			}
			return s.Release(t.Context())
		}},
		{"fencing.LockSet.Release/ErrNotHeld+ErrInvalid/nil", core, noLock, func(t *testing.T) error {
			return nilSet.Release(t.Context())
		}},
		{"fencing.LockSet.Extend/ErrNotHeld+ErrInvalid/nil", core, noLock, func(t *testing.T) error {
			return nilSet.Extend(t.Context(), time.Minute)
		}},
		{"fencing.LockSet.Extend/ErrInvalid", core, invalid, func(t *testing.T) error {
			e := newEnv(t)
			s, err := e.locker.TryAcquireAll(t.Context(), []string{"a", "b"})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Release(context.Background())
			return s.Extend(t.Context(), fencing.MaxTTL+time.Second)
		}},

		// Work that loses its lock.
		{"fencing.Locker.Do/ErrNotHeld/renewal", core, notHeld, func(t *testing.T) error {
			e := newEnv(t)
			return e.locker.Do(t.Context(), "r", func(ctx context.Context) error {
				return e.loseByRenewal(ctx, t, "r")
			}, shortLease)
		}},
		{"fencing.Locker.Do/ErrNotHeld/release", core, notHeld, func(t *testing.T) error {
			e := newEnv(t)
			return e.locker.Do(t.Context(), "r", func(ctx context.Context) error {
				takeOver(ctx, t)
				return nil
			})
		}},
		{"fencing.Locker.Do/ErrNotHeld/memo", core, notHeld, func(t *testing.T) error {
			e := newEnv(t)
			return e.locker.Do(t.Context(), "r", func(ctx context.Context) error {
				if err := fencing.LeaveMemo(ctx, memo); err != nil {
					return err
				}
				takeOver(ctx, t)
				return nil
			})
		}},
		{"fencing.Locker.Do/ErrNotHeld+ErrStaleToken", core, []error{fencing.ErrNotHeld, store.ErrStaleToken}, func(t *testing.T) error {
			// The work's late write is refused by a store that saw the next holder's; the
			// work returns the store's error, and Do adds the lock it found lost: two
			// failures, one line each (errors.Join), not the loss with ": " and the store's
			// error after it, which carries the prefix "store: ".
			e := newEnv(t)
			return e.locker.Do(t.Context(), "r", func(ctx context.Context) error {
				return staleWrite(ctx, t, "r")
			})
		}},
		{"fencing.Locker.DoAll/ErrNotHeld/renewal", core, notHeld, func(t *testing.T) error {
			e := newEnv(t)
			return e.locker.DoAll(t.Context(), []string{"a", "b"}, func(ctx context.Context) error {
				return e.loseByRenewal(ctx, t, "a")
			}, shortLease)
		}},
		{"fencing.Locker.DoAll/ErrNotHeld/release", core, notHeld, func(t *testing.T) error {
			e := newEnv(t)
			return e.locker.DoAll(t.Context(), []string{"a", "b"}, func(ctx context.Context) error {
				takeOver(ctx, t)
				return nil
			})
		}},

		// The Locker's other calls.
		{"fencing.Locker.Do/ErrInvalid/nil-func", core, invalid, func(t *testing.T) error {
			return newEnv(t).locker.Do(t.Context(), "r", nil)
		}},
		{"fencing.Locker.DoAll/ErrInvalid/nil-func", core, invalid, func(t *testing.T) error {
			return newEnv(t).locker.DoAll(t.Context(), []string{"a"}, nil)
		}},
		{"fencing.Locker.DoAll/ErrInvalid/no-resources", core, invalid, func(t *testing.T) error {
			return newEnv(t).locker.DoAll(t.Context(), nil, noop)
		}},
		{"fencing.Locker.TryAcquireAll/ErrInvalid/shared", core, invalid, func(t *testing.T) error {
			_, err := newEnv(t).locker.TryAcquireAll(t.Context(), []string{"a", "b"}, fencing.Shared())
			return err
		}},
		{"fencing.Locker.AcquireAll/ErrInvalid/too-many", core, invalid, func(t *testing.T) error {
			names := make([]string, fencing.MaxResources+1)
			for i := range names {
				names[i] = "r" + strconv.Itoa(i)
			}
			_, err := newEnv(t).locker.AcquireAll(t.Context(), names)
			return err
		}},
		{"fencing.Locker.Lead/ErrInvalid/nil-func", core, invalid, func(t *testing.T) error {
			return newEnv(t).locker.Lead(t.Context(), "r", nil)
		}},
		{"fencing.Locker.Lead/ErrInvalid/shared", core, invalid, func(t *testing.T) error {
			return newEnv(t).locker.Lead(t.Context(), "r", noop, fencing.Shared())
		}},
		{"fencing.Locker.TryAcquire/ErrInvalid/UnlessMemo", core, invalid, func(t *testing.T) error {
			_, err := newEnv(t).locker.TryAcquire(t.Context(), "r", fencing.UnlessMemo("lock"))
			return err
		}},
		{"fencing.Locker.TryAcquire/ErrInvalid/shared-limit", core, invalid, func(t *testing.T) error {
			_, err := newEnv(t).locker.TryAcquire(t.Context(), "r", fencing.Shared(), fencing.WithLimit(2))
			return err
		}},
		{"fencing.Locker.TryAcquire/ErrInvalid/kind", core, invalid, func(t *testing.T) error {
			// Live holders with a limit of 2, this call shared: refused by the script.
			e := newEnv(t)
			e.hold(t, "r", fencing.WithLimit(2))
			_, err := e.locker.TryAcquire(t.Context(), "r", fencing.Shared())
			return err
		}},
		{"fencing.Locker.TryAcquireAll/ErrInvalid/kind", core, invalid, func(t *testing.T) error {
			e := newEnv(t)
			// Live holders of "b" with a limit of 2, the set exclusive (limit 1).
			e.hold(t, "b", fencing.WithLimit(2))
			_, err := e.locker.TryAcquireAll(t.Context(), []string{"a", "b"})
			return err
		}},
		{"fencing.Locker.TryAcquire/ErrInvalid/counter-expiry", core, invalid, func(t *testing.T) error {
			e := newEnv(t, fencing.WithCounterExpiry(time.Minute))
			_, err := e.locker.TryAcquire(t.Context(), "r", fencing.WithTTL(time.Hour))
			return err
		}},
		{"fencing.Locker.TryAcquire/ErrInvalid/ring-replicas", core, invalid, func(t *testing.T) error {
			// WithReplicas on a Ring is an error wrapping ErrInvalid, as its doc says, found
			// before anything is sent.
			r := newEnv(t).r
			ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": r.Addr}, DB: r.DB})
			defer ring.Close()
			l := fencing.New(ring, fencing.WithPrefix(r.Prefix))
			defer l.Close()
			_, err := l.TryAcquire(t.Context(), "r", fencing.WithReplicas(1, 20*time.Millisecond))
			return err
		}},
		{"fencing.Locker.Acquire/ErrInvalid/max-wait", core, invalid, func(t *testing.T) error {
			_, err := newEnv(t).locker.Acquire(t.Context(), "r", fencing.WithMaxWait(-time.Second))
			return err
		}},
		{"fencing.Locker.Err/ErrInvalid", core, invalid, func(t *testing.T) error {
			return newEnv(t, fencing.WithLimit(0)).locker.Err()
		}},
		{"fencing.Locker.Err/ErrClosed", core, []error{fencing.ErrClosed}, func(t *testing.T) error {
			return newEnv(t).closed(t).Err()
		}},
		{"fencing.Locker.Inspect/ErrInvalid", core, invalid, func(t *testing.T) error {
			_, err := newEnv(t).locker.Inspect(t.Context(), "")
			return err
		}},
		{"fencing.Locker.ForceRelease/ErrNotHeld", core, notHeld, func(t *testing.T) error {
			e := newEnv(t)
			k := e.hold(t, "r")
			return e.locker.ForceRelease(t.Context(), "r", k.Token()+1)
		}},
		{"fencing.Locker.ForceRelease/ErrInvalid", core, invalid, func(t *testing.T) error {
			return newEnv(t).locker.ForceRelease(t.Context(), "", 1)
		}},
		{"fencing.Locker.ReadMemo/ErrInvalid/name", core, invalid, func(t *testing.T) error {
			_, _, err := newEnv(t).locker.ReadMemo(t.Context(), "r", "fence")
			return err
		}},
		{"fencing.Locker.ReadMemo/ErrInvalid/resource", core, invalid, func(t *testing.T) error {
			_, _, err := newEnv(t).locker.ReadMemo(t.Context(), "", "done")
			return err
		}},
		{"fencing.LeaveMemo/ErrInvalid/no-lock", core, invalid, func(t *testing.T) error {
			return fencing.LeaveMemo(t.Context(), memo)
		}},
		{"fencing.LeaveMemo/ErrInvalid/memo", core, invalid, func(t *testing.T) error {
			e := newEnv(t)
			return e.locker.Do(t.Context(), "r", func(ctx context.Context) error {
				return fencing.LeaveMemo(ctx, fencing.Memo{Name: "done", TTL: -time.Second})
			})
		}},

		// A shared or limited resource in the key layout of an earlier version.
		{"fencing.Locker.TryAcquire/ErrLayout/shared", core, layout, func(t *testing.T) error {
			e := newEnv(t)
			e.layout1(t, "r")
			_, err := e.locker.TryAcquire(t.Context(), "r", fencing.Shared())
			return err
		}},
		{"fencing.Locker.TryAcquire/ErrLayout/limit", core, layout, func(t *testing.T) error {
			e := newEnv(t)
			e.layout1(t, "r")
			_, err := e.locker.TryAcquire(t.Context(), "r", fencing.WithLimit(2))
			return err
		}},
		{"fencing.Locker.TryAcquire/ErrLayout/exclusive", core, layout, func(t *testing.T) error {
			e := newEnv(t)
			e.layout1(t, "r")
			_, err := e.locker.TryAcquire(t.Context(), "r")
			return err
		}},
		{"fencing.Locker.Acquire/ErrLayout", core, layout, func(t *testing.T) error {
			e := newEnv(t)
			e.layout1(t, "r")
			_, err := e.locker.Acquire(t.Context(), "r", fencing.Shared())
			return err
		}},
		{"fencing.Locker.Do/ErrLayout", core, layout, func(t *testing.T) error {
			e := newEnv(t)
			e.layout1(t, "r")
			return e.locker.Do(t.Context(), "r", noop, fencing.Shared())
		}},
		{"fencing.Locker.TryAcquireAll/ErrLayout", core, layout, func(t *testing.T) error {
			e := newEnv(t)
			e.layout1(t, "b")
			_, err := e.locker.TryAcquireAll(t.Context(), []string{"a", "b"})
			return err
		}},
		{"fencing.Locker.DoAll/ErrLayout", core, layout, func(t *testing.T) error {
			e := newEnv(t)
			e.layout1(t, "b")
			return e.locker.DoAll(t.Context(), []string{"a", "b"}, noop)
		}},
	}
}

// staleWrite, called in work that holds resource, stalls the work past its lease while the
// next holder writes resource to a store that checks tokens, and then writes with the
// work's own token: the store refuses it. It returns the store's error.
func staleWrite(ctx context.Context, t *testing.T, resource string) error {
	t.Helper()
	var s store.Memory
	token, ok := fencing.TokenFor(ctx, resource)
	if !ok {
		t.Fatalf("no token for %q in the work's context", resource)
	}
	err := fencingtest.Takeover(ctx, func(next context.Context) error {
		nt, _ := fencing.TokenFor(next, resource)
		return s.Admit(resource, nt)
	})
	if err != nil {
		t.Errorf("takeover: %v", err)
	}
	err = s.Admit(resource, token)
	if !errors.Is(err, store.ErrStaleToken) {
		t.Errorf("the late write: got %v, want store.ErrStaleToken", err)
	}
	return err
}

// waitHeld waits until resource is held, as Inspect reads it, or the test's context ends.
func (e *env) waitHeld(t *testing.T, resource string) {
	t.Helper()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		st, err := e.other.Inspect(t.Context(), resource)
		if err != nil {
			t.Fatal(err)
		}
		if len(st.Holders) > 0 {
			return
		}
		select {
		case <-t.Context().Done():
			t.Fatalf("%q never held", resource)
		case <-tick.C:
		}
	}
}

func TestCore(t *testing.T) {
	t.Parallel()
	run(t, append(verbCases(), coreCases()...))
}
