package fencing

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
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

// setRenewer renews the leases of a set together, in one pipeline (one round trip per server)
// every third of the TTL, from a timer, as renewer does for one lock: no goroutine runs between
// renewals. Losing any lock cancels the work with a cause that names it.
type setRenewer struct {
	set      *LockSet
	work     context.Context
	cfg      *config
	cancel   context.CancelCauseFunc
	ttl      time.Duration
	interval time.Duration
	retry    time.Duration

	mu      sync.Mutex
	stopped bool
	timer   *time.Timer
	lapse   *time.Timer // fires at the earliest local end of a lease
	running sync.WaitGroup
	lost    atomic.Bool
}

// keepAll starts renewing the set's leases until stop.
func (s *LockSet) keepAll(work context.Context, cfg *config, cancel context.CancelCauseFunc) *setRenewer {
	ttl := time.Duration(millis(cfg.ttl)) * time.Millisecond
	r := &setRenewer{
		set: s, work: work, cfg: cfg, cancel: cancel, ttl: ttl,
		interval: max(ttl/3, time.Millisecond),
		retry:    max(ttl/20, time.Millisecond),
	}
	for _, k := range s.locks {
		k.stopLater() // the renewals extend a grant's short lease
	}
	r.mu.Lock()
	first, _ := r.earliest()
	r.timer = time.AfterFunc(min(r.interval, time.Until(first)/3), r.run)
	r.lapse = time.AfterFunc(time.Until(first), r.lapsed)
	r.mu.Unlock()
	return r
}

// earliest returns the earliest local end of the set's leases and its lock.
func (r *setRenewer) earliest() (time.Time, *Lock) {
	var first time.Time
	var which *Lock
	for _, k := range r.set.locks {
		if d := k.deadline(); which == nil || d.Before(first) {
			first, which = d, k
		}
	}
	return first, which
}

func (r *setRenewer) stop() {
	r.mu.Lock()
	r.stopped = true
	r.timer.Stop()
	r.lapse.Stop()
	r.mu.Unlock()
	r.running.Wait()
}

func (r *setRenewer) run() {
	r.mu.Lock()
	if r.stopped {
		r.mu.Unlock()
		return
	}
	r.running.Add(1)
	r.mu.Unlock()
	defer r.running.Done()
	next, ok := r.renew()
	if !ok || r.lost.Load() {
		return
	}
	r.mu.Lock()
	if !r.stopped {
		r.timer.Reset(next)
	}
	r.mu.Unlock()
}

func (r *setRenewer) lapsed() {
	r.mu.Lock()
	if r.stopped {
		r.mu.Unlock()
		return
	}
	r.running.Add(1)
	r.mu.Unlock()
	defer r.running.Done()
	first, k := r.earliest()
	if wait := time.Until(first); wait > 0 {
		r.mu.Lock()
		if !r.stopped {
			r.lapse.Reset(wait)
		}
		r.mu.Unlock()
		return
	}
	r.lose(k, errLeaseLapsed)
}

// lose reports the loss of k to the hooks and cancels the work, once.
func (r *setRenewer) lose(k *Lock, cause error) {
	if r.lost.CompareAndSwap(false, true) {
		k.lose(r.work, r.cfg, named(r.cancel, k.resource), cause)
	}
}

// renew extends every lease once, in one pipeline, and returns when to renew next, or false
// when the work was cancelled because a lock is lost.
func (r *setRenewer) renew() (time.Duration, bool) {
	first, k := r.earliest()
	if !time.Now().Before(first) {
		r.lose(k, errLeaseLapsed)
		return 0, false
	}
	// The renewal may take no longer than the earliest lease has left.
	rctx, rcancel := context.WithDeadline(context.WithoutCancel(r.work), first)
	errs, _ := r.set.extendAll(rctx, r.ttl, OpRenew) // r.ttl is valid: the set was taken with it
	rcancel()
	transient := false
	for i, err := range errs {
		switch {
		case err == nil:
		case errors.Is(err, ErrNotHeld):
			r.lose(r.set.locks[i], fmt.Errorf("%w: %w", ErrNotHeld, errors.New("renewal found the lock taken or expired")))
			return 0, false
		default:
			transient = true
		}
	}
	if !transient {
		return r.interval, true
	}
	// Transient: retry soon while the earliest lease lasts.
	first, k = r.earliest()
	wait := time.Until(first)
	if wait <= 0 {
		r.lose(k, errLeaseLapsed)
		return 0, false
	}
	return min(r.retry, wait), true
}
