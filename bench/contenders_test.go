package bench_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/fencing"
)

const (
	// retryDelay is the peers' fixed delay between two attempts to take a busy lock.
	retryDelay = time.Millisecond
	// leaseTTL is every library's lease: fencekit's default, which a 1 ms hold never nears.
	leaseTTL = fencing.DefaultTTL
)

// A contender is one way of taking the lock, as one library offers it.
type contender struct {
	// name names the rows.
	name string
	// newProcess sets the library up for one process on its own client; every key it
	// creates starts with prefix.
	newProcess func(client redis.UniversalClient, prefix string) process
}

// A process is one contender set up on one client, used by that process's goroutines.
type process struct {
	// section takes the lock on resource, waiting as long as it must (ctx permitting), calls
	// hold while holding it, and releases it.
	section func(ctx context.Context, resource string, hold func()) error
	// close frees what newProcess set up, but not the client.
	close func()
}

// contenders, by name.
var (
	// fencekitAcquire takes the lock with Locker.Acquire and gives it back with Lock.Release:
	// one Locker per process.
	fencekitAcquire = fencekitTake("fencekit", "Acquire", (*fencing.Locker).Acquire)

	// fencekitTry takes the lock with Locker.TryAcquire, a single attempt, and gives it back
	// with Lock.Release: one Locker per process. A busy resource is an error, so it suits
	// only workloads in which no two goroutines want one resource at once.
	fencekitTry = fencekitTake("fencekit-try", "TryAcquire", (*fencing.Locker).TryAcquire)

	// fencekitDo runs the hold inside Locker.Do, which also starts and stops a renewer.
	fencekitDo = contender{"fencekit-do", func(client redis.UniversalClient, prefix string) process {
		l := fencing.New(client, fencing.WithPrefix(prefix))
		return process{
			section: func(ctx context.Context, resource string, hold func()) error {
				return l.Do(ctx, resource, func(context.Context) error {
					hold()
					return nil
				})
			},
			close: func() { _ = l.Close() },
		}
	}}

	// bsmRedislock is github.com/bsm/redislock's Obtain with a linear retry every retryDelay.
	// Obtain retries until ctx ends.
	bsmRedislock = redislockWith("redislock", redislock.LinearBackoff(retryDelay))

	// redislockOnce is bsm/redislock's Obtain with no retry: a single attempt, like
	// fencekitTry. A busy resource is an error.
	redislockOnce = redislockWith("redislock-once", redislock.NoRetry())

	// redsyncMutex is github.com/go-redsync/redsync/v4 with one go-redis v9 pool (a quorum
	// of one), a fixed retryDelay between attempts and no practical limit on their number.
	// A Mutex keeps the value it locked with, so every section makes a new one.
	redsyncMutex = contender{"redsync", func(client redis.UniversalClient, prefix string) process {
		rs := redsync.New(goredis.NewPool(client))
		opts := []redsync.Option{
			redsync.WithExpiry(leaseTTL),
			redsync.WithRetryDelay(retryDelay),
			redsync.WithTries(math.MaxInt32),
		}
		return process{
			section: func(ctx context.Context, resource string, hold func()) error {
				m := rs.NewMutex(peerKey(prefix, "redsync", resource), opts...)
				if err := m.LockContext(ctx); err != nil {
					return fmt.Errorf("LockContext: %w", err)
				}
				hold()
				ok, err := m.UnlockContext(ctx)
				if err == nil && !ok {
					err = errors.New("lock was not held")
				}
				if err != nil {
					return fmt.Errorf("UnlockContext: %w", err)
				}
				return nil
			},
			close: func() {},
		}
	}}
)

// peerKey returns the key a peer library locks resource under: the resource is the key's
// hash tag, as in fencekit's keys, so that on a cluster every library keeps a resource in
// the same slot, and the primaries' shares of the work can be compared. resource must not
// contain '{' or '}'.
func peerKey(prefix, library, resource string) string {
	return prefix + library + ":{" + resource + "}"
}

// fencekitTake returns the contender name that takes the lock with take, the Locker method
// named op, and gives it back with Lock.Release: one Locker per process. O is the type of
// take's options (generic, so that the benchmarks build against earlier releases too).
func fencekitTake[O any](name, op string, take func(*fencing.Locker, context.Context, string, ...O) (*fencing.Lock, error)) contender {
	return contender{name, func(client redis.UniversalClient, prefix string) process {
		l := fencing.New(client, fencing.WithPrefix(prefix))
		return process{
			section: func(ctx context.Context, resource string, hold func()) error {
				lock, err := take(l, ctx, resource)
				if err != nil {
					return fmt.Errorf("%s: %w", op, err)
				}
				hold()
				if err := lock.Release(ctx); err != nil {
					return fmt.Errorf("Release: %w", err)
				}
				return nil
			},
			close: func() { _ = l.Close() },
		}
	}}
}

// redislockWith returns the contender name that takes the lock with bsm/redislock's Obtain,
// retrying as retry says, and gives it back with Release.
func redislockWith(name string, retry redislock.RetryStrategy) contender {
	return contender{name, func(client redis.UniversalClient, prefix string) process {
		c := redislock.New(client)
		opt := &redislock.Options{RetryStrategy: retry}
		return process{
			section: func(ctx context.Context, resource string, hold func()) error {
				lock, err := c.Obtain(ctx, peerKey(prefix, "redislock", resource), leaseTTL, opt)
				if err != nil {
					return fmt.Errorf("Obtain: %w", err)
				}
				hold()
				if err := lock.Release(ctx); err != nil {
					return fmt.Errorf("Release: %w", err)
				}
				return nil
			},
			close: func() {},
		}
	}}
}
