package fencing

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fencekit/fencekit/fencing/observe"
	"github.com/fencekit/fencekit/internal/wire"
)

// Waiting: Acquire makes one attempt, then waits in the room (room.go) for a grant to take.

// releaseTimeout bounds releases made with a fresh context.
const releaseTimeout = 5 * time.Second

// Acquire takes resource as TryAcquire does, waiting while it is busy. Waiting is first come,
// first served across every process, in a queue kept in Redis: while waiters are queued, no
// acquisition takes the resource ahead of them, even when it is free. A release hands the
// resource to the longest-waiting waiters in the same round trip and wakes only their
// processes; a holder whose lease runs out is replaced about a round trip after its end. The
// Lock returned may start with a lease shorter than the TTL, extended to it in the background
// unless it is released or extended first (see docs/waiting.md).
//
// When ctx ends first, Acquire holds nothing (a grant meanwhile goes to the next waiter) and
// returns an error matching both [ErrNotAcquired] and ctx.Err(), whose [BusyError.RetryAfter] is
// the holders' lease left when the waiter left the queue. A waiter keeps its place through errors
// that can pass by themselves (a lost connection, a timeout, LOADING, READONLY, CLUSTERDOWN,
// MASTERDOWN, TRYAGAIN, BUSY: a restart or a failover) for up to 30s of them in a row, then fails
// with an error that also matches the last. Any other error ends it.
func (l *Locker) Acquire(ctx context.Context, resource string, opts ...CallOption) (*Lock, error) {
	return l.acquire(ctx, l.config(opts), resource)
}

// acquire is Acquire with the call's settings resolved.
func (l *Locker) acquire(ctx context.Context, cfg *config, resource string) (*Lock, error) {
	ctx, begin := cfg.hooks.start(ctx, observe.OpAcquire, resource), time.Now()
	lock, attempts, err := (*Lock)(nil), 0, l.check(ctx, cfg, resource)
	if err == nil {
		lock, attempts, err = l.wait(ctx, cfg, resource)
	}
	if err != nil {
		err = opErr("acquire", resource, err)
	}
	cfg.hooks.end(ctx, acquired(observe.OpAcquire, resource, attempts, begin, lock, err))
	return lock, err
}

// wait is Acquire's loop, one attempt (unless this Locker waits there) then the room's wait;
// it returns how many scripts it sent.
func (l *Locker) wait(ctx context.Context, cfg *config, resource string) (*Lock, int, error) {
	k := wire.For(cfg.prefix, resource)
	parent, attempts, begin := ctx, 0, time.Now()
	if cfg.maxWait >= 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cfg.maxWait)
		defer cancel()
	}
	call := waitCall{keys: k, kind: cfg.kind, ttl: time.Duration(millis(cfg.ttl)) * time.Millisecond, floor: cfg.timeFloor, expiry: cfg.expiry, label: cfg.label}
	// The uncontended path: one script and no subscription.
	if cfg.maxWait == 0 || !l.room.listening(k) {
		attempts++
		lock, busy, err := l.attempt(parent, cfg, resource, k, "", "")
		switch {
		case err == nil && busy == nil:
			return lock, attempts, nil
		case err != nil && (cfg.maxWait == 0 || !passing(err)):
			return nil, attempts, err
		case busy != nil && cfg.maxWait == 0:
			return nil, attempts, busy
		case busy != nil:
			call.seen, call.left = time.Now(), busy.RetryAfter
		}
		// Busy, or an error that can pass, which the room rides out.
	}
	call.join = func(ctx context.Context, elem, entry string) (*Lock, wire.AcquireReply, error) {
		attempts++
		lock, r, err := l.try(ctx, cfg, resource, k, elem, entry)
		var late *BusyError
		if errors.As(err, &late) {
			return nil, wire.AcquireReply{Left: -1}, nil // taken too late and freed: the poll queues it again
		}
		return lock, r, err
	}
	call.checked = func() { attempts++ }
	l.waits.Add(1)
	defer l.waits.Add(-1)
	for {
		lock, g, err := l.room.wait(ctx, parent, call)
		switch {
		case err != nil:
			return nil, attempts, l.waitErr(parent, resource, begin, err)
		case lock != nil:
			return lock, attempts, nil
		}
		lock, err = l.take(parent, cfg, resource, k, g)
		if err == errLapsed {
			continue // the grant's lease ran out before it was confirmed: queue again
		}
		return lock, attempts, err
	}
}

// waitErr returns the error of a wait that the room ended with err.
func (l *Locker) waitErr(parent context.Context, resource string, begin time.Time, err error) error {
	var e *waitEnded
	if !errors.As(err, &e) {
		return err
	}
	b := &BusyError{Resource: resource, RetryAfter: max(e.left, 0), Waited: time.Since(begin), Ahead: e.ahead}
	if parent.Err() != nil && errors.Is(e.last, parent.Err()) {
		e.last = nil // the last check failed for the context's end, which the text gives once
	}
	switch {
	case isDone(l.done):
		return ErrClosed
	case parent.Err() != nil && e.last != nil:
		return fmt.Errorf("%w: %w: %w", b, parent.Err(), e.last)
	case parent.Err() != nil:
		return fmt.Errorf("%w: %w", b, parent.Err())
	case e.last != nil:
		return fmt.Errorf("%w: %w", b, e.last) // WithMaxWait ran out
	}
	return b
}

// errLapsed is take's error when the grant had lapsed: the caller queues again.
var errLapsed = errors.New("grant lapsed")

// take turns a grant into a Lock, or returns errLapsed. With half of the grant's lease left, it
// returns at once, extending a lease shorter than the TTL later; otherwise, and always with
// WithReplicas (whose WAIT comes first), it extends the lock to the TTL first, through errors
// that can pass while the lease lasts.
func (l *Locker) take(ctx context.Context, cfg *config, resource string, k wire.Keys, g granted) (*Lock, error) {
	lock := &Lock{locker: l, hooks: cfg.hooks, resource: resource, keys: k, kind: cfg.kind, label: cfg.label, value: g.value, token: g.token, acquired: time.Now()}
	lock.setValidUntil(g.start, g.lease)
	if cfg.replicas == 0 && time.Until(lock.deadline()) > g.lease/2 {
		if ttl := time.Duration(millis(cfg.ttl)) * time.Millisecond; ttl > g.lease {
			lock.extendLater(ttl)
		}
		return lock, nil
	}
	err := l.confirm(ctx, cfg, lock)
	for retry := newBackoff(retryFirst, retryMost); passing(err) && time.Until(lock.deadline()) > retry.next && ctx.Err() == nil; {
		select {
		case <-time.After(retry.step()):
			err = l.confirm(ctx, cfg, lock)
		case <-ctx.Done():
		}
	}
	switch {
	case err == nil:
		return lock, nil
	case errors.Is(err, ErrNotHeld):
		return nil, errLapsed
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	l.release(rctx, &wire.Release{Keys: []wire.Keys{k}, Values: []string{g.value}, Kind: cfg.kind, Keep: true}) // passes the grant on
	cancel()
	if ctx.Err() != nil {
		return nil, fmt.Errorf("%w: %w", ErrNotAcquired, ctx.Err())
	}
	return nil, err
}
