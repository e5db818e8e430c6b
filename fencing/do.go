package fencing

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/fencekit/fencekit/fencing/observe"
	"github.com/fencekit/fencekit/internal/wire"

	"github.com/fencekit/fencekit/fencing/internal/stall"
)

// Do takes the lock on resource (waiting as [Locker.Acquire] does), runs fn while holding it,
// and releases it. fn's context carries the fencing token ([TokenFromContext], and [TokenFor]
// with the resource); pass the token to every write fn makes.
//
// While fn runs, Do renews the lease in the background every third of the TTL, retrying
// transient Redis errors while the lease lasts. It cancels fn's context, with a cause matching
// [ErrNotHeld] (see [context.Cause]), as soon as a renewal finds the lock gone or the lease's
// local validity (on the monotonic clock, from when the acquire was sent) runs out unrenewed.
// fn should stop writing then; a store that checks the token rejects its late writes anyway.
//
// Do returns fn's error, which also matches ErrNotHeld when the lock was lost, or Acquire's
// error without calling fn. The lock is released when fn returns or panics, with a fresh
// context, so a cancelled caller does not leave it held until its TTL. No goroutine started by
// Do outlives it: Do returns once a renewal in progress has returned, which against a hung
// server takes up to the client's ReadTimeout (fn's context is cancelled on time regardless).
func (l *Locker) Do(ctx context.Context, resource string, fn func(ctx context.Context) error, opts ...CallOption) error {
	if fn == nil {
		return opErr("do", resource, invalidf("nil function"))
	}
	cfg := l.config(opts)
	lock, err := l.acquire(ctx, cfg, resource)
	if err != nil {
		return err
	}
	return l.hold(ctx, cfg, []*Lock{lock}, nil, fn)
}

// DoAll takes the locks of all resources (waiting as [Locker.AcquireAll] does, in the canonical
// order, deadlock-free), runs fn while holding them all, and releases them, as [Locker.Do] does
// with one. fn's context carries each resource's token, which [TokenFor](ctx, resource)
// returns ([TokenFromContext] only when the set has one resource): pass it to the writes of
// that resource. The leases are renewed together, in one round trip per server, and fn's
// context is cancelled as soon as any lock is lost, with a cause matching [ErrNotHeld] whose
// text names the lost resource. DoAll returns fn's error, which also matches ErrNotHeld when a
// lock was lost, or AcquireAll's error without calling fn, holding nothing. The locks are
// released with a fresh context. No goroutine started by DoAll outlives it.
func (l *Locker) DoAll(ctx context.Context, resources []string, fn func(ctx context.Context) error, opts ...CallOption) error {
	if fn == nil {
		return opErr("do all", "", invalidf("nil function"))
	}
	cfg := l.config(opts)
	set, err := l.acquireAll(ctx, cfg, observe.OpAcquireAll, resources)
	if err != nil {
		return err
	}
	return l.hold(ctx, cfg, set.locks, set, fn)
}

// hold runs fn under locks taken by Do (one lock), DoAll (set) or a term of Lead, as Do says.
func (l *Locker) hold(ctx context.Context, cfg *config, locks []*Lock, set *LockSet, fn func(ctx context.Context) error) (err error) {
	h := &hold{locks: locks, set: set, cfg: cfg}
	work, cancel := context.WithCancelCause(stall.With((&held{locks: locks, hold: h}).with(ctx), door{}))
	cancelOf := func(k *Lock) context.CancelCauseFunc { return named(cancel, k.resource) }
	h.renewer = startRenewer(work, cfg, locks, h.extend, cancelOf)

	returned := false
	defer func() {
		// Runs when fn returns and when it panics; a panic goes on after the release.
		h.renewer.stop()
		lost := context.Cause(work)
		cancel(nil)
		if !errors.Is(lost, ErrNotHeld) {
			lost = nil
		}
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), min(cfg.ttl, releaseTimeout))
		errs := h.release(rctx)
		rcancel()
		if !returned {
			return
		}
		for i, e := range errs {
			switch {
			case lost == nil && errors.Is(e, ErrNotHeld):
				lost = e // the lease lapsed between two renewals
				locks[i].lost(work, cfg.hooks, observe.OpRelease, e)
			case e != nil && !errors.Is(e, ErrNotHeld) && err == nil:
				err = e // the release failed: the lock stays held until its lease runs out
			}
		}
		switch {
		case lost == nil, errors.Is(err, ErrNotHeld):
			// fn's error tells of the loss already (the context's cause, often).
		case err == nil:
			err = lost
		default:
			err = errors.Join(lost, err) // two failures, each with its own text, ours first
		}
	}()
	err = fn(work)
	returned = true
	return err
}

// A hold is the locks that one Do, DoAll or term of Lead holds while its work runs.
type hold struct {
	locks   []*Lock
	set     *LockSet // DoAll's; nil for one lock
	cfg     *config  // the settings it was taken with
	renewer *renewer
	memo    atomic.Pointer[wire.Memo] // LeaveMemo's, written by the release
}

// extend renews every lease of h to ttl and returns the errors.
func (h *hold) extend(ctx context.Context, ttl time.Duration) []error {
	if h.set != nil {
		return h.set.extendAll(ctx, ttl, observe.OpRenew) // ttl is valid: the set was taken with it
	}
	return []error{h.locks[0].extend(ctx, ttl, observe.OpRenew)}
}

// release releases every lock of h, one lock with LeaveMemo's memo, and returns the errors.
func (h *hold) release(ctx context.Context) []error {
	if h.set != nil {
		return h.set.releaseAll(ctx)
	}
	var m wire.Memo
	if p := h.memo.Load(); p != nil {
		m = *p
	}
	return []error{h.locks[0].release(ctx, m)}
}

// named returns cancel with a cause that names resource, the lock that was lost.
func named(cancel context.CancelCauseFunc, resource string) context.CancelCauseFunc {
	return func(cause error) { cancel(opErr("renew", resource, cause)) }
}
