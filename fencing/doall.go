package fencing

import (
	"context"
	"errors"
	"time"
)

// DoAll takes the locks of all resources (waiting as [Locker.AcquireAll] does, in the
// canonical order, deadlock-free), runs fn while holding them all, and releases them. fn's
// context carries each resource's fencing token: [TokenFor](ctx, resource) returns it; pass
// each resource's token to the writes of that resource. [TokenFromContext] returns the token
// when the set has one resource, and false when it has several.
//
// While fn runs, DoAll renews every lease together in the background every third of the
// TTL, in one round trip per server (a pipeline), as [Locker.Do] renews its one. It cancels fn's context as soon as any of the locks is lost (a renewal
// finds it gone, or its local validity runs out before a renewal succeeds), with a cause
// matching [ErrNotHeld] (see [context.Cause]) whose text names the lost resource.
//
// DoAll returns fn's error. When a lock was lost, the error also matches ErrNotHeld. When the
// locks cannot be taken, DoAll returns AcquireAll's error, holds nothing and does not call fn.
// The locks are released with a fresh context (the caller's may be done), in one round trip
// per server. No goroutine started by DoAll outlives it.
func (l *Locker) DoAll(ctx context.Context, resources []string, fn func(ctx context.Context) error, opts ...Option) (err error) {
	if fn == nil {
		return invalidf("nil function")
	}
	cfg := l.cfg.with(opts)
	set, err := l.acquireAll(ctx, cfg, OpAcquireAll, resources)
	if err != nil {
		return err
	}
	work, cancel := context.WithCancelCause(withSet(ctx, set))
	r := set.keepAll(work, cfg, cancel)

	returned := false
	defer func() {
		// Runs when fn returns and when it panics; a panic goes on after the release.
		r.stop()
		lost := context.Cause(work)
		cancel(nil)
		if !errors.Is(lost, ErrNotHeld) {
			lost = nil
		}
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), min(cfg.ttl, releaseTimeout))
		ctxr := cfg.hooks.start(rctx, OpReleaseAll, "")
		begin := time.Now()
		errs := set.release(ctxr)
		rerr := joinAll(nonNil(errs))
		ev := set.event(OpReleaseAll, begin, rerr, errs)
		ev.Held = time.Since(set.locks[0].acquired)
		cfg.hooks.end(ctxr, ev)
		rcancel()
		if !returned {
			return
		}
		var gone []error
		var other error
		for i, e := range errs {
			switch {
			case errors.Is(e, ErrNotHeld):
				// The lease lapsed between two renewals.
				k := set.locks[i]
				gone = append(gone, e)
				if lost == nil {
					cfg.hooks.lost(work, Event{Op: OpRelease, Resource: k.resource, Token: k.token, Outcome: OutcomeNotHeld, Err: e, Held: time.Since(k.acquired)})
				}
			case e != nil && other == nil:
				other = e
			}
		}
		switch {
		case lost != nil:
		case len(gone) > 0:
			lost = joinAll(gone)
		case other != nil && err == nil:
			err = rerr
		}
		err = join(err, lost)
	}()
	err = fn(work)
	returned = true
	return err
}

// nonNil returns the errors of errs that are not nil.
func nonNil(errs []error) []error {
	var out []error
	for _, e := range errs {
		if e != nil {
			out = append(out, e)
		}
	}
	return out
}

// keepAll starts renewing the set's leases together until stop: every third of the TTL, in
// one pipeline (one round trip per server), from a timer, as Do renews its one. Losing any
// lock cancels the work with a cause that names it.
func (s *LockSet) keepAll(work context.Context, cfg *config, cancel context.CancelCauseFunc) *renewer {
	extend := func(ctx context.Context, ttl time.Duration) []error {
		errs, _ := s.extendAll(ctx, ttl, OpRenew) // ttl is valid: the set was taken with it
		return errs
	}
	return startRenewer(work, cfg, s.locks, extend, func(k *Lock) context.CancelCauseFunc { return named(cancel, k.resource) })
}
