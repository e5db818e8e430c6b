package fencing

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencekit/fencekit/fencing/observe"

	"github.com/fencekit/fencekit/fencing/internal/backoff"
	"github.com/fencekit/fencekit/fencing/internal/room"
	"github.com/fencekit/fencekit/internal/wire"
)

// A Lock is one acquisition of a resource, with its fencing token. Its methods are safe for
// concurrent use; Release and Extend take effect in the order Redis runs them, and once the
// lock is released or lost every later call returns [ErrNotHeld]. The methods of a nil *Lock
// (or a zero Lock) return an error matching ErrNotHeld and [ErrInvalid], so
// `defer lock.Release(ctx)` is safe after a failed acquire.
type Lock struct {
	locker   *Locker
	hooks    hookList
	resource string
	keys     wire.Keys
	mode     mode
	value    string // the holder's value while this acquisition holds the resource: "<owner>:<token>"
	token    int64
	acquired time.Time     // when the acquire script was sent, or the grant taken (monotonic)
	behind   time.Duration // how far the server clock was behind the last token (see observe.Event)

	validUntil atomic.Int64 // local lease deadline: nanoseconds since acquired
	released   atomic.Bool  // a Release returned nil: later ones answer ErrNotHeld locally

	mu       sync.Mutex    // orders the deferred extension with Extend and Release
	later    *time.Timer   // the deferred extension of a grant's short lease (see extendLater); nil once done
	laterTTL time.Duration // the lease that extension sets
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

// Shared reports whether the acquisition is shared ([Shared]); false for a nil *Lock.
func (k *Lock) Shared() bool {
	return k != nil && k.mode.Shared
}

// Release frees the resource if this acquisition still holds it. When waiters are queued for
// the resource, it goes straight to the longest-waiting ones that it now admits, with new
// tokens, in the same round trip. It returns an error wrapping [ErrNotHeld] and changes
// nothing when the lease has run out or the resource belongs to a newer acquisition. Other
// errors come from Redis; the resource then stays held until the lease runs out. A release
// that go-redis retries after losing the reply returns what its first run did: nil when that
// run released the lock, ErrNotHeld only when the lock had passed on before it.
func (k *Lock) Release(ctx context.Context) error {
	return k.releaseWith(ctx, nil)
}

// releaseWith is Release, with a memo written in the same step (nil: none).
func (k *Lock) releaseWith(ctx context.Context, m *Memo) error {
	if k == nil || k.locker == nil {
		return opErr("release", "", errNoLock("Lock"))
	}
	k.stopLater()
	ctx = k.hooks.start(ctx, observe.OpRelease, k.resource)
	begin := time.Now()
	released, err := false, error(nil)
	if !k.released.Load() {
		// Once released, the record in Redis would answer a new release as it answers a
		// retry: nil. It is not a retry, and the lock is not this acquisition's.
		released, err = k.locker.releaseOne(ctx, k.keys, k.value, k.mode, k.keepRecord(), m)
	}
	err = k.releasedAs(released, err)
	k.hooks.end(ctx, k.event(observe.OpRelease, begin, err))
	return err
}

// releasedAs records the outcome of a release of k and returns its error.
func (k *Lock) releasedAs(released bool, err error) error {
	switch {
	case err != nil:
		return opErr("release", k.resource, err)
	case !released:
		return opErr("release", k.resource, ErrNotHeld)
	}
	k.released.Store(true)
	k.validUntil.Store(0)
	return nil
}

// Extend resets the lease to ttl, counted from now, if this acquisition still holds the
// resource. It returns an error wrapping [ErrNotHeld] and changes nothing when the lease has
// run out or the resource belongs to a newer acquisition; it never takes a free resource
// again. A ttl outside [MinTTL, MaxTTL] returns an error wrapping [ErrInvalid], sends nothing
// and changes nothing. A lock taken from the queue of a resource keeps its pending extension
// to the TTL (see [Locker.Acquire]) until an extension has taken effect.
func (k *Lock) Extend(ctx context.Context, ttl time.Duration) error {
	if k == nil || k.locker == nil {
		return opErr("extend", "", errNoLock("Lock"))
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	err := k.extend(ctx, ttl, observe.OpExtend)
	if err == nil || errors.Is(err, ErrNotHeld) {
		k.dropLater()
	}
	return err
}

// extendLater extends a lock taken from the queue, whose grant's lease is shorter than the
// TTL, to ttl: once, a third of the way into the lease, so that the hand-off does not wait
// for it and a lock released sooner never needs it. An error that can pass is tried again
// while the lease lasts. An extension that takes effect, Release and Do's renewals cancel it.
func (k *Lock) extendLater(ttl time.Duration) {
	retry := backoff.New(retryFirst, retryMost)
	var run func()
	run = func() {
		k.mu.Lock()
		defer k.mu.Unlock()
		if k.later == nil {
			return // cancelled meanwhile
		}
		ctx, cancel := context.WithDeadline(context.Background(), k.deadline())
		err := k.extend(ctx, ttl, observe.OpRenew)
		cancel()
		if room.Passing(err) && time.Until(k.deadline()) > retry.Peek() {
			k.later.Reset(retry.Step())
			return
		}
		k.later = nil
	}
	k.mu.Lock()
	k.later, k.laterTTL = time.AfterFunc(time.Until(k.deadline())/3, run), ttl
	k.mu.Unlock()
}

// keepUp makes sure a lock that a wait took (a grant's short lease, or a lease renewed while
// other resources were waited for) goes on to ttl, as a single Acquire's does: unless an
// extension is pending, one is scheduled when less than half of ttl is left.
func (k *Lock) keepUp(ttl time.Duration) {
	k.mu.Lock()
	pending := k.later != nil
	k.mu.Unlock()
	if !pending && time.Until(k.deadline()) < ttl/2 {
		k.extendLater(ttl)
	}
}

// stopLater cancels extendLater's extension, if any.
func (k *Lock) stopLater() {
	k.mu.Lock()
	k.dropLater()
	k.mu.Unlock()
}

// dropLater cancels extendLater's extension; the caller holds k.mu.
func (k *Lock) dropLater() {
	if k.later != nil {
		k.later.Stop()
		k.later = nil
	}
}

// extend resets the lease to ttl as op for the hooks; a ttl out of range is refused before
// anything is sent.
func (k *Lock) extend(ctx context.Context, ttl time.Duration, op observe.Op) error {
	ctx = k.hooks.start(ctx, op, k.resource)
	begin := time.Now()
	if err := validTTL(ttl); err != nil {
		k.hooks.end(ctx, k.event(op, begin, err))
		return err
	}
	ms := millis(ttl)
	res, err := wire.Extend.RunOn(ctx, k.locker.client, k.keys, "", k.extendArgs(ms)...).Result()
	err = k.extended(begin, ms, res, err)
	k.hooks.end(ctx, k.event(op, begin, err))
	return err
}

// extendArgs returns extend.lua's arguments for a lease of ms.
func (k *Lock) extendArgs(ms int64) []any {
	if k.mode.Exclusive() {
		return []any{k.value, ms}
	}
	return []any{k.value, ms, k.mode.Arg()}
}

// extended reads extend.lua's reply to an extension to ms sent at begin, and records the new
// validity when it took effect.
func (k *Lock) extended(begin time.Time, ms int64, res any, err error) error {
	n, _ := res.(int64)
	switch {
	case err != nil:
		return opErr("extend", k.resource, err)
	case n == wire.NotHeld:
		return opErr("extend", k.resource, ErrNotHeld)
	case n != wire.Taken:
		return opErr("extend", k.resource, fmt.Errorf("unexpected reply %v", res))
	}
	k.setValidUntil(begin, time.Duration(ms)*time.Millisecond)
	return nil
}

// confirm resets a lock granted from the queue to the lease cfg asks for, and with
// WithReplicas waits for the replicas to acknowledge it: the WAIT follows a write of this
// connection's, so it also covers the grant that came before.
func (l *Locker) confirm(ctx context.Context, cfg *config, k *Lock) error {
	if cfg.replicas == 0 {
		return k.Extend(ctx, cfg.ttl)
	}
	ms := millis(cfg.ttl)
	begin := time.Now()
	res, err := l.replicated(ctx, cfg, wire.Declare(l.client, []wire.Keys{k.keys}, ""), wire.Extend, k.extendArgs(ms), func(res any) bool {
		return res == int64(wire.Taken)
	})
	if err != nil {
		return err
	}
	return k.extended(begin, ms, res, nil)
}

// TTL returns the remaining lease as Redis counts it, or an error wrapping [ErrNotHeld] when
// this acquisition no longer holds the resource.
func (k *Lock) TTL(ctx context.Context) (time.Duration, error) {
	if k == nil || k.locker == nil {
		return 0, opErr("ttl", "", errNoLock("Lock"))
	}
	args := []any{k.value}
	if !k.mode.Exclusive() {
		args = append(args, k.mode.Arg())
	}
	res, err := wire.TTL.RunOn(ctx, k.locker.client, k.keys, "", args...).Result()
	if err != nil {
		return 0, opErr("ttl", k.resource, err)
	}
	left, held, err := wire.ParseTTL(res)
	switch {
	case err != nil:
		return 0, opErr("ttl", k.resource, err)
	case !held:
		return 0, opErr("ttl", k.resource, ErrNotHeld)
	}
	return left, nil
}

func (k *Lock) event(op observe.Op, begin time.Time, err error) observe.Event {
	e := observe.Event{Op: op, Resource: k.resource, Token: k.token, Outcome: observe.OutcomeOK, Elapsed: time.Since(begin)}
	if err != nil {
		e.Outcome, e.Err = outcomeOf(err), err
	}
	if op == observe.OpRelease {
		e.Held = time.Since(k.acquired)
	}
	return e
}

// setValidUntil records that the lease lasts ttl from sent, by the local monotonic clock,
// less a margin of 1% for clock drift between this host and Redis.
func (k *Lock) setValidUntil(sent time.Time, ttl time.Duration) {
	k.validUntil.Store(int64(sent.Sub(k.acquired) + ttl - ttl/100))
}

// keepRecord reports whether the lease has less than wire.RecordTTL left by the local clock,
// so that the record of its release must outlive it (see the release script).
func (k *Lock) keepRecord() bool { return time.Until(k.deadline()) < wire.RecordTTL }

// deadline returns the local end of the lease.
func (k *Lock) deadline() time.Time {
	return k.acquired.Add(time.Duration(k.validUntil.Load()))
}

// valid reports whether the lease has not run out by the local clock.
func (k *Lock) valid() bool {
	return time.Now().Before(k.deadline())
}

// errNoLock is the error of a call on a nil or zero Lock or LockSet, which no acquisition
// made: it matches ErrNotHeld, as it holds nothing, and ErrInvalid.
type errNoLock string

func (e errNoLock) Error() string {
	return "fencing: not held: a nil or zero " + string(e) + ", from no acquisition"
}

// Is reports whether target is ErrNotHeld or ErrInvalid.
func (errNoLock) Is(target error) bool { return target == ErrNotHeld || target == ErrInvalid }
