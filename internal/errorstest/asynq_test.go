package errorstest

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/fencekit/fencekit/asynqfence"
	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/store"
)

const asynqPrefix = "asynqfence: "

// task is the task of the asynq cases: its resource is "r", its entity "e".
var task = asynq.NewTask("invoice:send", []byte("42"))

func resourceR(*asynq.Task) (string, error) { return "r", nil }
func entityE(*asynq.Task) (string, error)   { return "e", nil }

// handlerOf returns fn as an asynq.Handler.
func handlerOf(fn func(ctx context.Context) error) asynq.Handler {
	return asynq.HandlerFunc(func(ctx context.Context, _ *asynq.Task) error { return fn(ctx) })
}

var succeed = handlerOf(noop)

// process runs task through Wrap(h, l, resource, opts...).
func process(t *testing.T, h asynq.Handler, l *fencing.Locker, resource asynqfence.ResourceFunc, opts ...asynqfence.Option) error {
	t.Helper()
	return asynqfence.Wrap(h, l, resource, opts...).ProcessTask(t.Context(), task)
}

// busy checks that err is the adapter's busy error, and returns it.
func busy(t *testing.T, err error) error {
	t.Helper()
	if !asynqfence.IsBusy(err) {
		t.Errorf("IsBusy(%v) is false, want true", err)
	}
	return err
}

func asynqCases() []errCase {
	invalid := []error{fencing.ErrInvalid, asynq.SkipRetry}
	notAcquired := []error{fencing.ErrNotAcquired}
	notHeld := []error{fencing.ErrNotHeld}
	errPayload := errors.New("bad payload")
	badPayload := func(*asynq.Task) (string, error) { return "", errPayload }

	return []errCase{
		// Busy.
		{"asynqfence.Wrap/ErrNotAcquired", core, notAcquired, func(t *testing.T) error {
			e := newEnv(t)
			e.hold(t, "r")
			return busy(t, process(t, succeed, e.locker, resourceR))
		}},
		{"asynqfence.Wrap/ErrNotAcquired+RevokeTask", core, []error{fencing.ErrNotAcquired, asynq.RevokeTask}, func(t *testing.T) error {
			e := newEnv(t)
			e.hold(t, "r")
			return busy(t, process(t, succeed, e.locker, resourceR, asynqfence.WithDropDuplicates()))
		}},
		{"asynqfence.Wrap/ErrNotAcquired/max-wait", core, notAcquired, func(t *testing.T) error {
			e := newEnv(t)
			e.hold(t, "r")
			return busy(t, process(t, succeed, e.locker, resourceR, asynqfence.WithLockOptions(fencing.WithMaxWait(50*time.Millisecond))))
		}},
		{"asynqfence.Wrap/ErrNotAcquired/limit", core, notAcquired, func(t *testing.T) error {
			e := newEnv(t)
			e.hold(t, "r", fencing.WithLimit(2))
			e.hold(t, "r", fencing.WithLimit(2))
			return busy(t, process(t, succeed, e.locker, resourceR, asynqfence.WithLimit(2)))
		}},
		{"asynqfence.Wrap/ErrNotAcquired/shared", core, notAcquired, func(t *testing.T) error {
			e := newEnv(t)
			e.hold(t, "r")
			return busy(t, process(t, succeed, e.locker, resourceR, asynqfence.WithShared(func(*asynq.Task) bool { return true })))
		}},
		{"asynqfence.WithEntity/ErrNotAcquired/entity", core, notAcquired, func(t *testing.T) error {
			e := newEnv(t)
			e.hold(t, "e")
			return busy(t, process(t, succeed, e.locker, resourceR, asynqfence.WithEntity(entityE)))
		}},
		{"asynqfence.WithEntity/ErrNotAcquired/slot", core, notAcquired, func(t *testing.T) error {
			e := newEnv(t)
			e.hold(t, "r", fencing.WithLimit(2))
			e.hold(t, "r", fencing.WithLimit(2))
			return busy(t, process(t, succeed, e.locker, resourceR, asynqfence.WithLimit(2), asynqfence.WithEntity(entityE)))
		}},
		{"asynqfence.Middleware/ErrNotAcquired", core, notAcquired, func(t *testing.T) error {
			e := newEnv(t)
			e.hold(t, "r")
			return busy(t, asynqfence.Middleware(e.locker, resourceR)(succeed).ProcessTask(t.Context(), task))
		}},
		{"asynqfence.MiddlewareAll/ErrNotAcquired", core, notAcquired, func(t *testing.T) error {
			e := newEnv(t)
			e.hold(t, "b")
			all := func(*asynq.Task) ([]string, error) { return []string{"a", "b"}, nil }
			return busy(t, asynqfence.MiddlewareAll(e.locker, all)(succeed).ProcessTask(t.Context(), task))
		}},

		// A setup that cannot work, and input that never will.
		{"asynqfence.Wrap/SkipRetry/resource-func", asynqPrefix, []error{asynq.SkipRetry, errPayload}, func(t *testing.T) error {
			return process(t, succeed, newEnv(t).locker, badPayload)
		}},
		{"asynqfence.WithEntity/SkipRetry/entity-func", asynqPrefix, []error{asynq.SkipRetry, errPayload}, func(t *testing.T) error {
			return process(t, succeed, newEnv(t).locker, resourceR, asynqfence.WithEntity(badPayload))
		}},
		{"asynqfence.MiddlewareAll/SkipRetry/resources-func", asynqPrefix, []error{asynq.SkipRetry, errPayload}, func(t *testing.T) error {
			all := func(*asynq.Task) ([]string, error) { return nil, errPayload }
			return asynqfence.MiddlewareAll(newEnv(t).locker, all)(succeed).ProcessTask(t.Context(), task)
		}},
		{"asynqfence.Wrap/ErrInvalid/nil-locker", asynqPrefix, invalid, func(t *testing.T) error {
			return process(t, succeed, nil, resourceR)
		}},
		{"asynqfence.Wrap/ErrInvalid/nil-resource-func", asynqPrefix, invalid, func(t *testing.T) error {
			return process(t, succeed, newEnv(t).locker, nil)
		}},
		{"asynqfence.Wrap/ErrInvalid/nil-handler", asynqPrefix, invalid, func(t *testing.T) error {
			return process(t, nil, newEnv(t).locker, resourceR)
		}},
		{"asynqfence.Wrap/ErrInvalid/nil-task", asynqPrefix, invalid, func(t *testing.T) error {
			return asynqfence.Wrap(succeed, newEnv(t).locker, resourceR).ProcessTask(t.Context(), nil)
		}},
		{"asynqfence.WithTTL/ErrInvalid", asynqPrefix, invalid, func(t *testing.T) error {
			return process(t, succeed, newEnv(t).locker, resourceR, asynqfence.WithTTL(-time.Second))
		}},
		{"asynqfence.WithLimit/ErrInvalid", asynqPrefix, invalid, func(t *testing.T) error {
			return process(t, succeed, newEnv(t).locker, resourceR, asynqfence.WithLimit(fencing.MaxLimit+1))
		}},
		{"asynqfence.WithShared/ErrInvalid/limit", asynqPrefix, invalid, func(t *testing.T) error {
			return process(t, succeed, newEnv(t).locker, resourceR, asynqfence.WithLimit(2), asynqfence.WithShared(func(*asynq.Task) bool { return true }))
		}},
		{"asynqfence.WithEntity/ErrInvalid/same-name", asynqPrefix, invalid, func(t *testing.T) error {
			return process(t, succeed, newEnv(t).locker, resourceR, asynqfence.WithEntity(resourceR))
		}},
		{"asynqfence.MiddlewareAll/ErrInvalid/entity", asynqPrefix, invalid, func(t *testing.T) error {
			all := func(*asynq.Task) ([]string, error) { return []string{"a"}, nil }
			return asynqfence.MiddlewareAll(newEnv(t).locker, all, asynqfence.WithEntity(entityE))(succeed).ProcessTask(t.Context(), task)
		}},
		// The Locker's refusals, as they are, joined with asynq.SkipRetry.
		{"asynqfence.Wrap/ErrInvalid/long-name", core, invalid, func(t *testing.T) error {
			long := func(*asynq.Task) (string, error) { return strings.Repeat("r", fencing.MaxResourceLen+1), nil }
			return process(t, succeed, newEnv(t).locker, long)
		}},
		{"asynqfence.Wrap/ErrInvalid/kind", core, invalid, func(t *testing.T) error {
			e := newEnv(t)
			e.hold(t, "r", fencing.WithLimit(2))
			return process(t, succeed, e.locker, resourceR)
		}},
		{"asynqfence.Wrap/ErrInvalid/lock-option", core, invalid, func(t *testing.T) error {
			return process(t, succeed, newEnv(t).locker, resourceR, asynqfence.WithLockOptions(fencing.WithLabel("a\nb")))
		}},
		{"asynqfence.Wrap/ErrInvalid/locker", core, invalid, func(t *testing.T) error {
			return process(t, succeed, newEnv(t, fencing.WithLimit(0)).locker, resourceR)
		}},
		{"asynqfence.MiddlewareAll/ErrInvalid/too-many", core, invalid, func(t *testing.T) error {
			all := func(*asynq.Task) ([]string, error) {
				names := make([]string, fencing.MaxResources+1)
				for i := range names {
					names[i] = "r" + strconv.Itoa(i)
				}
				return names, nil
			}
			return asynqfence.MiddlewareAll(newEnv(t).locker, all)(succeed).ProcessTask(t.Context(), task)
		}},
		{"asynqfence.Wrap/ErrClosed+SkipRetry", core, []error{fencing.ErrClosed, asynq.SkipRetry}, func(t *testing.T) error {
			return process(t, succeed, newEnv(t).closed(t), resourceR)
		}},
		{"asynqfence.Wrap/ErrClosed", core, []error{fencing.ErrClosed}, func(t *testing.T) error {
			e := newEnv(t)
			l := e.newLocker(t)
			h := asynqfence.Wrap(succeed, l, resourceR)
			_ = l.Close()
			return h.ProcessTask(t.Context(), task)
		}},
		{"asynqfence.Wrap/ErrNotReplicated", core, []error{fencing.ErrNotReplicated}, func(t *testing.T) error {
			return process(t, succeed, newEnv(t).locker, resourceR, asynqfence.WithLockOptions(fencing.WithReplicas(1, 20*time.Millisecond)))
		}},
		{"asynqfence.Wrap/ErrLayout", core, []error{fencing.ErrLayout}, func(t *testing.T) error {
			e := newEnv(t)
			e.layout1(t, "r")
			return process(t, succeed, e.locker, resourceR, asynqfence.WithShared(func(*asynq.Task) bool { return true }))
		}},

		// A handler that lost its lock.
		{"asynqfence.Wrap/ErrNotHeld/renewal", core, notHeld, func(t *testing.T) error {
			e := newEnv(t)
			return process(t, handlerOf(func(ctx context.Context) error { return e.loseByRenewal(ctx, t, "r") }),
				e.locker, resourceR, asynqfence.WithLockOptions(shortLease))
		}},
		{"asynqfence.Wrap/ErrNotHeld/handler", core, notHeld, func(t *testing.T) error {
			// The handler's own error says so: a lock of its own that it found released.
			e := newEnv(t)
			return process(t, handlerOf(func(ctx context.Context) error {
				k, err := e.locker.TryAcquire(ctx, "inner")
				if err != nil {
					return err
				}
				_ = k.Release(ctx)
				return k.Release(ctx)
			}), e.locker, resourceR)
		}},
		{"asynqfence.Wrap/ErrNotHeld+ErrStaleToken", "store: ", []error{fencing.ErrNotHeld, store.ErrStaleToken}, func(t *testing.T) error {
			// A store refused the handler's write (a newer holder's token passed it) before
			// any renewal noticed: the adapter makes the handler's error match ErrNotHeld.
			e := newEnv(t)
			var s store.Memory
			if err := s.Admit("r", 1<<40); err != nil {
				t.Fatal(err)
			}
			return process(t, handlerOf(func(ctx context.Context) error {
				token, _ := fencing.TokenFromContext(ctx)
				return s.Admit("r", token)
			}), e.locker, resourceR)
		}},
		{"asynqfence.Wrap/ErrNotHeld+ErrStaleToken/lost", "", []error{fencing.ErrNotHeld, store.ErrStaleToken}, func(t *testing.T) error {
			// The handler stalled past its lease; the next holder wrote; its late write is
			// refused, and Do finds the lock lost too: the Locker's error and the store's,
			// one line each (see fencing.Locker.Do/ErrNotHeld+ErrStaleToken).
			e := newEnv(t)
			return process(t, handlerOf(func(ctx context.Context) error { return staleWrite(ctx, t, "r") }), e.locker, resourceR)
		}},
		{"asynqfence.WithEntity/ErrNotHeld/entity", core, notHeld, func(t *testing.T) error {
			e := newEnv(t)
			return process(t, handlerOf(func(ctx context.Context) error { return e.loseByRenewal(ctx, t, "e") }),
				e.locker, resourceR, asynqfence.WithEntity(entityE), asynqfence.WithLockOptions(shortLease))
		}},
		{"asynqfence.WithEntity/ErrNotHeld/slot", core, notHeld, func(t *testing.T) error {
			e := newEnv(t)
			return process(t, handlerOf(func(ctx context.Context) error { return e.loseByRenewal(ctx, t, "r") }),
				e.locker, resourceR, asynqfence.WithEntity(entityE), asynqfence.WithLockOptions(shortLease))
		}},
		{"asynqfence.MiddlewareAll/ErrNotHeld", core, notHeld, func(t *testing.T) error {
			e := newEnv(t)
			all := func(*asynq.Task) ([]string, error) { return []string{"a", "b"}, nil }
			h := handlerOf(func(ctx context.Context) error { return e.loseByRenewal(ctx, t, "b") })
			return asynqfence.MiddlewareAll(e.locker, all, asynqfence.WithLockOptions(shortLease))(h).ProcessTask(t.Context(), task)
		}},

		// The Scheduler.
		{"asynqfence.Scheduler.Register/ErrInvalid/spec", asynqPrefix, []error{fencing.ErrInvalid}, func(t *testing.T) error {
			_, err := newScheduler(t, newEnv(t).locker).Register("every day", asynq.NewTask("t", nil))
			return err
		}},
		{"asynqfence.Scheduler.Register/ErrInvalid/nil-task", asynqPrefix, []error{fencing.ErrInvalid}, func(t *testing.T) error {
			_, err := newScheduler(t, newEnv(t).locker).Register("@daily", nil)
			return err
		}},
		{"asynqfence.Scheduler.Register/ErrInvalid/twice", asynqPrefix, []error{fencing.ErrInvalid}, func(t *testing.T) error {
			s := newScheduler(t, newEnv(t).locker)
			if _, err := s.Register("@daily", asynq.NewTask("t", nil)); err != nil {
				t.Fatal(err)
			}
			_, err := s.Register("@daily", asynq.NewTask("t", nil))
			return err
		}},
		{"asynqfence.Scheduler.Unregister/ErrInvalid", asynqPrefix, []error{fencing.ErrInvalid}, func(t *testing.T) error {
			return newScheduler(t, newEnv(t).locker).Unregister("nope")
		}},
		{"asynqfence.Scheduler.Run/ErrInvalid/zero", asynqPrefix, []error{fencing.ErrInvalid}, func(t *testing.T) error {
			return new(asynqfence.Scheduler).Run(t.Context())
		}},
		{"asynqfence.Scheduler.Run/ErrInvalid/nil-locker", asynqPrefix, []error{fencing.ErrInvalid}, func(t *testing.T) error {
			return newScheduler(t, nil).Run(t.Context())
		}},
		{"asynqfence.Scheduler.Run/ErrInvalid/option", asynqPrefix, []error{fencing.ErrInvalid}, func(t *testing.T) error {
			return newScheduler(t, newEnv(t).locker, asynqfence.WithCatchUp(-time.Second)).Run(t.Context())
		}},
		{"asynqfence.Scheduler.Run/ErrInvalid/leader-option", core, []error{fencing.ErrInvalid}, func(t *testing.T) error {
			return newScheduler(t, newEnv(t).locker, asynqfence.WithLeaderOptions(fencing.Shared())).Run(t.Context())
		}},
		{"asynqfence.Scheduler.Run/ErrClosed", core, []error{fencing.ErrClosed}, func(t *testing.T) error {
			return newScheduler(t, newEnv(t).closed(t)).Run(t.Context())
		}},
	}
}

// newScheduler returns a Scheduler "s" on l with an Asynq client of the test's Redis.
func newScheduler(t *testing.T, l *fencing.Locker, opts ...asynqfence.SchedulerOption) *asynqfence.Scheduler {
	t.Helper()
	r := newEnv(t).r
	c := asynq.NewClientFromRedisClient(r.Client)
	t.Cleanup(func() { _ = c.Close() })
	return asynqfence.NewScheduler(c, l, "s", opts...)
}

func TestAsynq(t *testing.T) {
	t.Parallel()
	run(t, asynqCases())
}
