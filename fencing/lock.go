package fencing

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// A Lock is one acquisition of a resource's lock, with its fencing token. Its methods are
// safe for concurrent use; Release and Extend take effect in the order Redis runs them, and
// once the lock is released or lost every later call returns [ErrNotHeld]. The methods of a
// nil *Lock return ErrNotHeld, so `defer lock.Release(ctx)` is safe after a failed acquire.
type Lock struct {
	locker   *Locker
	hooks    hookList
	resource string
	keys     keys
	value    string // the lock key's value while this acquisition holds it: "<owner>:<token>"
	token    int64
	acquired time.Time     // when the acquire script was sent, or the grant taken (monotonic)
	behind   time.Duration // how far the server clock was behind the last token (see Event)

	validUntil atomic.Int64 // local lease deadline: nanoseconds since acquired
	released   atomic.Bool  // a Release returned nil: later ones answer ErrNotHeld locally

	mu    sync.Mutex
	later *time.Timer // extends a grant's short lease to the TTL (see extendLater); nil once done
}

// Token returns the fencing token issued with this acquisition: a positive integer that is
// higher than every token issued before it for the same resource. Pass it to the store,
// which must reject writes carrying a lower token than it has seen.
func (k *Lock) Token() int64 {
	if k == nil {
		return 0
	}
	return k.token
}

// Resource returns the resource name the lock was taken on.
func (k *Lock) Resource() string {
	if k == nil {
		return ""
	}
	return k.resource
}

// Release frees the lock if this acquisition still holds it. When waiters are queued for the
// resource, the lock goes straight to the longest-waiting one, with a new token, in the same
// round trip. It returns an error wrapping [ErrNotHeld] and changes nothing when the lock has
// expired or belongs to a newer acquisition. Other errors come from Redis; the lock then
// stays held until its TTL runs out. A release that go-redis retries after losing the
// reply returns what its first run did: nil when that run released the lock (Redis keeps
// the outcome for 10 s, see docs/design.md), ErrNotHeld only when the lock had passed on
// before it.
func (k *Lock) Release(ctx context.Context) error {
	return k.releaseWith(ctx, nil)
}

// releaseWith is Release, with the commands that before adds sent in the same pipeline, just
// before the release script (see seam.Call).
func (k *Lock) releaseWith(ctx context.Context, before func(redis.Pipeliner)) error {
	if k == nil {
		return opErr("release", "", ErrNotHeld)
	}
	k.stopLater()
	ctx = k.hooks.start(ctx, OpRelease, k.resource)
	begin := time.Now()
	released, err := false, error(nil)
	if !k.released.Load() {
		// Once released, the record in Redis would answer a new release as it answers a
		// retry: nil. It is not a retry, and the lock is not this acquisition's.
		released, err = k.locker.release(ctx, k.keys, k.value, before)
	}
	switch {
	case err != nil:
		err = opErr("release", k.resource, err)
	case !released:
		err = opErr("release", k.resource, ErrNotHeld)
	default:
		k.released.Store(true)
		k.validUntil.Store(0)
	}
	k.hooks.end(ctx, k.event(OpRelease, begin, err))
	return err
}

// Extend resets the lock's TTL to ttl, counted from now, if this acquisition still holds
// it. It returns an error wrapping [ErrNotHeld] and changes nothing when the lock has
// expired or belongs to a newer acquisition; it never takes a free lock again. A ttl outside
// [MinTTL, MaxTTL] returns an error wrapping [ErrInvalid] and sends nothing.
func (k *Lock) Extend(ctx context.Context, ttl time.Duration) error {
	k.stopLater()
	return k.extend(ctx, ttl, OpExtend)
}

// extendLater extends a lock that Acquire took from the queue, whose grant's lease is shorter
// than the TTL, to ttl: once, a third of the way into the lease, so that the hand-off does not
// wait for it and a lock released sooner never needs it. An error that can pass is tried again
// while the lease lasts. Release and Extend cancel it.
func (k *Lock) extendLater(cfg *config, ttl time.Duration) {
	retry := newBackoff(cfg.retryMin, cfg.retryMax)
	var run func()
	run = func() {
		ctx, cancel := context.WithDeadline(context.Background(), k.deadline())
		err := k.extend(ctx, ttl, OpRenew)
		cancel()
		k.mu.Lock()
		defer k.mu.Unlock()
		if k.later == nil {
			return // cancelled meanwhile
		}
		if passing(err) && !errors.Is(err, ErrNotHeld) && time.Until(k.deadline()) > retry.peek() {
			k.later.Reset(retry.step())
			return
		}
		k.later = nil
	}
	k.mu.Lock()
	k.later = time.AfterFunc(time.Until(k.deadline())/3, run)
	k.mu.Unlock()
}

// stopLater cancels extendLater's extension, if any.
func (k *Lock) stopLater() {
	if k == nil {
		return
	}
	k.mu.Lock()
	if k.later != nil {
		k.later.Stop()
		k.later = nil
	}
	k.mu.Unlock()
}

func (k *Lock) extend(ctx context.Context, ttl time.Duration, op Op) error {
	if k == nil {
		return opErr("extend", "", ErrNotHeld)
	}
	ctx = k.hooks.start(ctx, op, k.resource)
	begin := time.Now()
	if err := validTTL(ttl); err != nil {
		k.hooks.end(ctx, k.event(op, begin, err))
		return err
	}
	ms := millis(ttl)
	script := extendScript
	if k.keys.limit > 1 {
		script = limitExtendScript
	}
	n, err := script.Run(ctx, k.locker.client, []string{k.keys.lock}, k.value, ms).Int64()
	switch {
	case isWrongType(err):
		// The other kind of lock holds the key: this acquisition's lease ran out.
		err = opErr("extend", k.resource, ErrNotHeld)
	case err != nil:
		err = opErr("extend", k.resource, err)
	case n == flagNotHeld:
		err = opErr("extend", k.resource, ErrNotHeld)
	case n != flagAcquired:
		err = opErr("extend", k.resource, fmt.Errorf("unexpected reply %d", n))
	default:
		k.setValidUntil(begin, time.Duration(ms)*time.Millisecond)
	}
	k.hooks.end(ctx, k.event(op, begin, err))
	return err
}

// confirm resets a lock granted from the queue to the lease cfg asks for, and with
// WithReplicas waits for the replicas to acknowledge it: the WAIT follows a write of this
// connection's, so it also covers the grant that came before.
func (l *Locker) confirm(ctx context.Context, cfg *config, k *Lock) error {
	if cfg.replicas == 0 {
		return k.extend(ctx, cfg.ttl, OpExtend)
	}
	ms := millis(cfg.ttl)
	begin := time.Now()
	src := extendSrc
	if k.keys.limit > 1 {
		src = limitExtendSrc
	}
	res, err := l.replicated(ctx, cfg, k.keys, src, []any{k.value, ms}, func(res any) bool {
		n, _ := res.(int64)
		return n == flagAcquired
	})
	if err != nil {
		return err
	}
	if n, _ := res.(int64); n != flagAcquired {
		return ErrNotHeld
	}
	k.setValidUntil(begin, time.Duration(ms)*time.Millisecond)
	return nil
}

// TTL returns the lock's remaining lease as Redis counts it, or an error wrapping
// [ErrNotHeld] when this acquisition no longer holds the lock.
func (k *Lock) TTL(ctx context.Context) (time.Duration, error) {
	if k == nil {
		return 0, opErr("ttl", "", ErrNotHeld)
	}
	script := ttlScript
	if k.keys.limit > 1 {
		script = limitTTLScript
	}
	ms, err := script.Run(ctx, k.locker.client, []string{k.keys.lock}, k.value).Int64()
	switch {
	case isWrongType(err):
		return 0, opErr("ttl", k.resource, ErrNotHeld)
	case err != nil:
		return 0, opErr("ttl", k.resource, err)
	case ms < 0:
		// -3: not ours; -2 cannot happen; -1 (no TTL) means someone else rewrote the key.
		return 0, opErr("ttl", k.resource, ErrNotHeld)
	}
	return time.Duration(ms) * time.Millisecond, nil
}

func (k *Lock) event(op Op, begin time.Time, err error) Event {
	e := Event{Op: op, Resource: k.resource, Token: k.token, Outcome: OutcomeOK, Elapsed: time.Since(begin)}
	if err != nil {
		e.Outcome, e.Err = outcomeOf(err), err
	}
	if op == OpRelease {
		e.Held = time.Since(k.acquired)
	}
	return e
}

// setValidUntil records that the lease lasts ttl from sent, by the local monotonic clock,
// less a margin of 1% for clock drift between this host and Redis.
func (k *Lock) setValidUntil(sent time.Time, ttl time.Duration) {
	k.validUntil.Store(int64(sent.Sub(k.acquired) + ttl - ttl/100))
}

// deadline returns the local end of the lease.
func (k *Lock) deadline() time.Time {
	return k.acquired.Add(time.Duration(k.validUntil.Load()))
}

// valid reports whether the lease has not run out by the local clock.
func (k *Lock) valid() bool {
	return time.Now().Before(k.deadline())
}
