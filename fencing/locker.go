package fencing

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// A Locker takes fenced locks on a Redis server. It is safe for concurrent use by many
// goroutines; create one per client and share it. Close it when done to free the
// subscription that wakes waiters.
type Locker struct {
	client redis.UniversalClient
	cfg    config
	waits  *waiting

	closing sync.Once
	done    chan struct{} // closed by Close
}

// New returns a Locker that keeps its locks on client: a *redis.Client (also from
// redis.NewFailoverClient), a *redis.ClusterClient (also from redis.NewFailoverClusterClient)
// or a *redis.Ring. New does not talk to Redis. An invalid option or a nil client does not
// panic: every call on the Locker then returns an error wrapping [ErrInvalid].
//
// A Ring spreads resources over independent servers; adding or removing a shard moves a
// resource to a server whose counter is lower, so tokens stop increasing. Prefer a Client or
// a ClusterClient. On a Ring, waiters poll instead of subscribing.
func New(client redis.UniversalClient, opts ...Option) *Locker {
	l := &Locker{client: client, cfg: defaultConfig(), done: make(chan struct{})}
	for _, o := range opts {
		if o != nil {
			o.apply(&l.cfg)
		}
	}
	if isNil(client) && l.cfg.err == nil {
		l.cfg.err = invalidf("nil redis client")
	}
	if l.cfg.err == nil {
		l.cfg.err = l.cfg.conflict()
	}
	l.waits = newWaiting(client, l.cfg.err == nil, l.passOn, l.done)
	return l
}

func isNil(c redis.UniversalClient) bool {
	if c == nil {
		return true
	}
	v := reflect.ValueOf(c)
	return v.Kind() == reflect.Pointer && v.IsNil()
}

// Err reports whether the Locker is usable: it returns the error that every TryAcquire,
// Acquire and Do call would return before reaching Redis, one wrapping [ErrInvalid] for a nil
// client or an invalid option given to [New], or [ErrClosed] after Close; nil otherwise. It
// sends nothing to Redis.
func (l *Locker) Err() error {
	if l.cfg.err != nil {
		return l.cfg.err
	}
	if isDone(l.done) {
		return ErrClosed
	}
	return nil
}

// Close frees the Locker's subscription and wakes its waiters, whose Acquire calls then
// return an error wrapping [ErrClosed]; later TryAcquire, Acquire and Do calls return it too.
// Locks already held can still be released and extended. Close does not close the Redis
// client. It is safe to call more than once.
func (l *Locker) Close() error {
	l.closing.Do(func() {
		close(l.done)
		l.waits.close()
	})
	return nil
}

// TryAcquire makes one attempt to take the lock on resource (with [WithLimit], one of its
// slots). It returns the lock and its fencing token, or an error wrapping [ErrNotAcquired]
// when another owner holds it (every slot is taken) or waiters are queued for it (the error
// also carries the holder's remaining TTL, the earliest lease end of a limited resource's
// holders; see [RetryAfter]) or when the reply came back too late to trust the lease. Any other error
// (Redis unreachable, invalid input wrapping [ErrInvalid], a context already done) means
// nothing is held. A call refused before it reaches Redis (invalid input, a closed Locker, a
// context already done) sends nothing, and hooks still observe it. Options override the
// Locker's settings for this call, such as [WithTTL].
func (l *Locker) TryAcquire(ctx context.Context, resource string, opts ...Option) (*Lock, error) {
	cfg := l.cfg.with(opts)
	ctx = cfg.hooks.start(ctx, OpTryAcquire, resource)
	begin := time.Now()
	var lock *Lock
	var r attemptReply
	attempts := 0
	err := l.check(ctx, cfg, resource)
	if err == nil {
		attempts = 1
		lock, r, err = l.attempt(ctx, cfg, resource, cfg.keys(resource), "", "")
	}
	ev := Event{Op: OpTryAcquire, Resource: resource, Attempts: attempts, Elapsed: time.Since(begin)}
	switch {
	case err != nil:
		ev.Outcome, ev.Err = outcomeOf(err), err
	case lock == nil:
		ev.Outcome = OutcomeBusy
		err = &busyError{resource: resource, retryAfter: r.pttl}
	default:
		ev.Outcome, ev.Token, ev.ClockBehind = OutcomeAcquired, lock.token, lock.behind
	}
	cfg.hooks.end(ctx, ev)
	return lock, err
}

// Acquire takes the lock on resource (with [WithLimit], one of its slots), waiting while
// another owner holds it (every slot is taken). A waiter that finds the resource busy joins
// the resource's queue in Redis; the holder's release hands the
// lock to the longest-waiting waiter (of any Locker) in the same round trip, with a new token
// and a lease of the TTL or 3s, whichever is shorter, and announces it on the resource's
// channel, which one pub/sub connection per Locker carries (one per primary on a Cluster; a
// Ring polls). Acquire returns at once; the Lock extends a shorter lease to the TTL a third of
// the way into it, in the background, unless it is released or extended first (so
// [Lock.TTL] may show 3s at first). A queued waiter also checks with Redis at
// least once a second, which keeps its place alive and takes a lock whose holder's lease ran
// out. Waiting is first come, first served: while waiters are queued, neither TryAcquire nor
// Acquire takes the lock ahead of them, even when it is free.
//
// When ctx ends first, Acquire returns an error that matches both [ErrNotAcquired] and
// ctx.Err() under errors.Is, and holds nothing: the waiter leaves the queue, and a lock
// granted to it meanwhile goes to the next waiter. A Redis error on the way into the queue
// ends the call at once and is returned as it is (it does not match ErrNotAcquired). Once
// queued, a waiter keeps its place through errors that can pass by themselves (a lost
// connection, a timeout, LOADING, READONLY, CLUSTERDOWN, MASTERDOWN, TRYAGAIN, BUSY: a restart
// or a failover) and checks again with a back-off, for up to 30s of them in a row; the
// error that ends the wait then also matches the last of them. Any other error ends it at once.
func (l *Locker) Acquire(ctx context.Context, resource string, opts ...Option) (*Lock, error) {
	return l.acquire(ctx, l.cfg.with(opts), resource)
}

// acquire is Acquire with the call's settings resolved.
func (l *Locker) acquire(ctx context.Context, cfg *config, resource string) (*Lock, error) {
	ctx = cfg.hooks.start(ctx, OpAcquire, resource)
	begin := time.Now()
	var lock *Lock
	attempts := 0
	err := l.check(ctx, cfg, resource)
	if err == nil {
		lock, attempts, err = l.wait(ctx, cfg, resource)
	}
	ev := Event{Op: OpAcquire, Resource: resource, Attempts: attempts, Elapsed: time.Since(begin)}
	if err != nil {
		ev.Outcome, ev.Err = outcomeOf(err), err
	} else {
		ev.Outcome, ev.Token, ev.ClockBehind = OutcomeAcquired, lock.token, lock.behind
	}
	cfg.hooks.end(ctx, ev)
	return lock, err
}

// check validates a call before anything is sent.
func (l *Locker) check(ctx context.Context, cfg *config, resource string) error {
	if cfg.err != nil {
		return cfg.err
	}
	if err := cfg.conflict(); err != nil {
		return err
	}
	if err := validResource(resource); err != nil {
		return err
	}
	if isDone(l.done) {
		return ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return join(ErrNotAcquired, err)
	}
	return nil
}

// outcomeOf classifies an error for hooks.
func outcomeOf(err error) Outcome {
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return OutcomeCancelled
	case errors.Is(err, ErrNotHeld):
		return OutcomeNotHeld
	case errors.Is(err, ErrNotAcquired):
		return OutcomeBusy
	}
	return OutcomeError
}

// busyError is TryAcquire's error when another owner holds the lock, and Acquire's when its
// wait ended.
type busyError struct {
	resource   string
	retryAfter time.Duration
	waited     time.Duration // Acquire: how long it waited; 0 for a single attempt
	ahead      int           // with waited: waiters ahead in the queue when it left, -1 unknown
}

func (e *busyError) Error() string {
	if e.retryAfter == lateReply {
		return fmt.Sprintf("fencing: not acquired: %q: Redis replied after the lease could have run out", e.resource)
	}
	msg := fmt.Sprintf("fencing: not acquired: %q is held by another owner", e.resource)
	if e.waited <= 0 {
		return msg
	}
	msg += fmt.Sprintf(" after waiting %v", e.waited.Round(time.Millisecond))
	switch {
	case e.ahead == 0:
		msg += ", first in the queue"
	case e.ahead == 1:
		msg += ", 1 waiter ahead"
	case e.ahead > 1:
		msg += fmt.Sprintf(", %d waiters ahead", e.ahead)
	}
	return msg
}

func (e *busyError) Is(target error) bool { return target == ErrNotAcquired }

// RetryAfter reports how long the holder's lease had left when an acquisition failed because
// the resource was busy: the remaining TTL reported by Redis in the same round trip. The
// second result is false when err carries no such figure.
func RetryAfter(err error) (time.Duration, bool) {
	var b *busyError
	if errors.As(err, &b) && b.retryAfter > 0 {
		return b.retryAfter, true
	}
	return 0, false
}

// isDone reports whether done is closed.
func isDone(done <-chan struct{}) bool {
	select {
	case <-done:
		return true
	default:
		return false
	}
}
