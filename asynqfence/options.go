package asynqfence

import (
	"fmt"
	"time"

	"github.com/hibiken/asynq"

	"github.com/fencekit/fencekit/fencing"
)

// An Option configures [Middleware] or [Wrap].
type Option interface {
	apply(*config)
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// config is what a Middleware or Wrap call shares between its tasks; it is not modified
// after newConfig returns.
type config struct {
	locker     *fencing.Locker
	resource   ResourceFunc
	all        ResourcesFunc // MiddlewareAll: several resources per task (set.go)
	entity     ResourceFunc  // WithEntity: an exclusive lock beside the resource's (entity.go)
	ttl        time.Duration // 0: the Locker's TTL
	limit      int           // 0: the Locker's limit
	drop       bool
	shared     func(t *asynq.Task) bool // nil: every task exclusive
	lockOpts   []fencing.CallOption
	opts       []fencing.CallOption // the per-call options of every acquisition
	sharedOpts []fencing.CallOption // opts and fencing.Shared, for the tasks shared says
	entityOpts []fencing.CallOption // the per-call options of an entity's lock: opts, exclusive
	err        error                // the first invalid option or argument, or the Locker's Err
}

// WithTTL sets the lease length of every acquisition; the lease is renewed every third of it
// while the handler runs, and it is how long a crashed worker keeps the resource locked.
// Default: the Locker's TTL (the [fencing.WithTTL] given to [fencing.New], otherwise
// [fencing.DefaultTTL], 30s), the same lease as every other caller of that Locker; the
// task's deadline does not shorten or lengthen it. A d below [fencing.MinTTL] or above
// [fencing.MaxTTL] makes every task fail with an error wrapping [fencing.ErrInvalid] and
// [asynq.SkipRetry].
func WithTTL(d time.Duration) Option {
	return optionFunc(func(c *config) {
		if (d < fencing.MinTTL || d > fencing.MaxTTL) && c.err == nil {
			c.err = invalid(fmt.Sprintf("ttl %v out of range [%v, %v]", d, fencing.MinTTL, fencing.MaxTTL))
		}
		c.ttl = d
	})
}

// WithLimit lets up to n tasks hold the same resource at once, across every worker: at most
// 2 invoice jobs per customer, at most 5 calls per tenant to a partner API (see
// [fencing.WithLimit]). A task over the limit is busy, as a task that finds an exclusive
// resource held: it is retried without counting as a failure when the server uses
// [IsFailure] and [RetryDelay], or dropped with [WithDropDuplicates]. Every worker must use
// the same limit for a resource: while tasks hold it with another limit, a task fails with
// an error wrapping [fencing.ErrInvalid] and [asynq.SkipRetry]. Default: the Locker's limit
// (1 unless [fencing.New] was given [fencing.WithLimit]). An n below 1 or above
// [fencing.MaxLimit] makes every task fail with an error wrapping [fencing.ErrInvalid] and
// [asynq.SkipRetry].
func WithLimit(n int) Option {
	return optionFunc(func(c *config) {
		if (n < 1 || n > fencing.MaxLimit) && c.err == nil {
			c.err = invalid(fmt.Sprintf("limit %d out of range [1, %d]", n, fencing.MaxLimit))
		}
		c.limit = n
	})
}

// WithShared makes the tasks for which shared returns true take their resource's lock shared
// ([fencing.Shared]): such tasks run together on a resource, and a task that takes it
// exclusively runs alone, first come, first served across both kinds, so a stream of readers
// never starves a writer. A task that finds the resource held the other way is busy, as any
// busy task (see [WithDropDuplicates], [IsFailure]). It cannot go with [WithLimit] above 1 or
// with [MiddlewareAll]: every task then fails with an error wrapping [fencing.ErrInvalid] and
// [asynq.SkipRetry]. Default: nil, every task exclusive.
func WithShared(shared func(t *asynq.Task) bool) Option {
	return optionFunc(func(c *config) { c.shared = shared })
}

// WithDropDuplicates makes a task whose resource is busy be dropped instead of retried: its
// error wraps [asynq.RevokeTask] as well as the busy error, so Asynq marks the task done and
// neither retries nor archives it (it counts as processed, not failed, in the queue's
// statistics). Use it when a task that finds its resource busy duplicates work in progress.
// Default: off; a busy task is retried (see [IsFailure] and [RetryDelay]).
func WithDropDuplicates() Option {
	return optionFunc(func(c *config) { c.drop = true })
}

// WithLockOptions adds per-call options to every acquisition, after the adapter's own
// (fencing.WithMaxWait(0), the task's label, and fencing.WithTTL from [WithTTL] when it is
// given), so they override them. For example, fencing.WithMaxWait(2*time.Second) waits up to
// two seconds for a busy resource before reporting it busy, fencing.WithHooks observes the
// acquisitions, and fencing.WithLabel("...") labels them instead of the task's ID. Several
// WithLockOptions add up. Default: none.
func WithLockOptions(opts ...fencing.CallOption) Option {
	return optionFunc(func(c *config) { c.lockOpts = append(c.lockOpts, opts...) })
}

// tryOnce makes every acquisition a single attempt unless WithLockOptions says otherwise.
var tryOnce = fencing.WithMaxWait(0)

// exclusive makes an entity's lock exclusive whatever the Locker's limit.
var exclusive = fencing.WithLimit(1)

// lockOptions returns the per-call options of every acquisition: a single attempt, the
// TTL of [WithTTL] and the limit of [WithLimit] if they were given (otherwise none, so the
// Locker's own apply), then the options of [WithLockOptions].
func (c *config) lockOptions() []fencing.CallOption {
	opts := make([]fencing.CallOption, 0, 3+len(c.lockOpts))
	opts = append(opts, tryOnce)
	if c.ttl > 0 {
		opts = append(opts, fencing.WithTTL(c.ttl))
	}
	if c.limit > 0 {
		opts = append(opts, fencing.WithLimit(c.limit))
	}
	return append(opts, c.lockOpts...)
}
