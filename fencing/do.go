package fencing

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Do takes the lock on resource (waiting as [Locker.Acquire] does), runs fn while holding
// it, and releases it. fn's context carries the fencing token ([TokenFromContext]); pass the
// token to every write fn makes.
//
// While fn runs, Do renews the lease in the background every third of the TTL. It cancels
// fn's context, with a cause matching [ErrNotHeld] (see [context.Cause]), as soon as a
// renewal finds the lock gone, or when the lease's local validity (counted on the monotonic
// clock from when the acquire was sent) runs out before a renewal succeeds. Transient Redis
// errors during renewal are retried while validity remains. fn should stop writing once its
// context is done; a store that checks the token rejects its late writes in any case.
//
// Do returns fn's error. When the lock was lost, the error also matches ErrNotHeld. When
// the lock cannot be taken, Do returns Acquire's error and does not call fn. The lock is
// released with a fresh context (the caller's may be done), so a cancelled caller does not
// leave it held until its TTL. No goroutine started by Do outlives it: Do returns once a
// renewal in progress has returned, which against a hung server takes up to the client's
// ReadTimeout (fn's context is cancelled on time regardless).
func (l *Locker) Do(ctx context.Context, resource string, fn func(ctx context.Context) error, opts ...Option) (err error) {
	if fn == nil {
		return invalidf("nil function")
	}
	cfg := l.cfg.with(opts)
	lock, err := l.acquire(ctx, cfg, resource)
	if err != nil {
		return err
	}
	return l.hold(ctx, cfg, lock, fn)
}

// hold is Do once the lock is taken: it runs fn under lock, renewing it, and releases it.
func (l *Locker) hold(ctx context.Context, cfg *config, lock *Lock, fn func(ctx context.Context) error) (err error) {
	work, cancel := context.WithCancelCause(withHeld(context.WithValue(ctx, leaseKey{}, lock), lock))
	r := lock.keepAlive(work, cfg, cancel)

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
		rerr := lock.Release(rctx)
		rcancel()
		if !returned {
			return
		}
		switch {
		case lost != nil:
		case errors.Is(rerr, ErrNotHeld):
			lost = rerr // the lease lapsed between two renewals
			cfg.hooks.lost(work, Event{Op: OpRelease, Resource: lock.resource, Token: lock.token, Outcome: OutcomeNotHeld, Err: rerr, Held: time.Since(lock.acquired)})
		case rerr != nil && err == nil:
			err = rerr
		}
		err = join(err, lost)
	}()
	err = fn(work)
	returned = true
	return err
}

// errLeaseLapsed is the cause when no renewal succeeded before the lease's local end.
var errLeaseLapsed = fmt.Errorf("%w: lease ran out before a renewal succeeded", ErrNotHeld)

// renewer renews a lease from a timer: no goroutine runs between renewals.
type renewer struct {
	lock     *Lock
	work     context.Context
	cfg      *config
	cancel   context.CancelCauseFunc
	ttl      time.Duration
	interval time.Duration // between successful renewals: a third of the TTL
	retry    time.Duration // after a transient error

	mu      sync.Mutex
	stopped bool
	timer   *time.Timer
	lapse   *time.Timer    // fires at the lease's local end, even while a renewal is stuck
	running sync.WaitGroup // a renewal or lapse check in progress
	lost    atomic.Bool    // the work was cancelled
}

// keepAlive starts renewing the lease every ttl/3 until stop, and cancels the work with an
// ErrNotHeld cause when the lock is lost or its validity runs out.
func (k *Lock) keepAlive(work context.Context, cfg *config, cancel context.CancelCauseFunc) *renewer {
	ttl := time.Duration(millis(cfg.ttl)) * time.Millisecond
	r := &renewer{
		lock: k, work: work, cfg: cfg, cancel: cancel, ttl: ttl,
		interval: max(ttl/3, time.Millisecond),
		retry:    max(ttl/20, time.Millisecond),
	}
	k.stopLater() // the renewals extend a grant's short lease
	r.mu.Lock()
	// A lock granted from the queue may start with a lease shorter than the TTL (see
	// grantLease): the first renewal comes within a third of what is left of it.
	r.timer = time.AfterFunc(min(r.interval, time.Until(k.deadline())/3), r.run)
	r.lapse = time.AfterFunc(time.Until(k.deadline()), r.lapsed)
	r.mu.Unlock()
	return r
}

// stop ends the renewals and waits for one in progress.
func (r *renewer) stop() {
	r.mu.Lock()
	r.stopped = true
	r.timer.Stop()
	r.lapse.Stop()
	r.mu.Unlock()
	r.running.Wait()
}

// run is one renewal; it schedules the next unless the lock is lost.
func (r *renewer) run() {
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

// lapsed runs at the lease's local end: unless a renewal moved the end meanwhile, it
// cancels the work, without waiting for a renewal that an unresponsive server holds up
// (go-redis bounds socket reads by ReadTimeout, not by the context, unless
// ContextTimeoutEnabled is set).
func (r *renewer) lapsed() {
	r.mu.Lock()
	if r.stopped {
		r.mu.Unlock()
		return
	}
	r.running.Add(1)
	r.mu.Unlock()
	defer r.running.Done()
	if wait := time.Until(r.lock.deadline()); wait > 0 {
		r.mu.Lock()
		if !r.stopped {
			r.lapse.Reset(wait)
		}
		r.mu.Unlock()
		return
	}
	r.lose(errLeaseLapsed)
}

// lose cancels the work once.
func (r *renewer) lose(cause error) {
	if r.lost.CompareAndSwap(false, true) {
		r.lock.lose(r.work, r.cfg, r.cancel, cause)
	}
}

// renew extends the lease once and returns when to renew next, or false when the work was
// cancelled because the lock is lost.
func (r *renewer) renew() (time.Duration, bool) {
	k := r.lock
	deadline := k.deadline()
	if !time.Now().Before(deadline) {
		r.lose(errLeaseLapsed)
		return 0, false
	}
	// The renewal may take no longer than the lease has left.
	rctx, rcancel := context.WithDeadline(context.WithoutCancel(r.work), deadline)
	err := k.extend(rctx, r.ttl, OpRenew)
	rcancel()
	switch {
	case err == nil:
		return r.interval, true
	case errors.Is(err, ErrNotHeld):
		r.lose(fmt.Errorf("%w: %w", ErrNotHeld, errors.New("renewal found the lock taken or expired")))
		return 0, false
	}
	// Transient: retry soon while the lease lasts.
	wait := time.Until(k.deadline())
	if wait <= 0 {
		r.lose(errLeaseLapsed)
		return 0, false
	}
	return min(r.retry, wait), true
}

// lose reports the loss to the hooks, then cancels the work.
func (k *Lock) lose(work context.Context, cfg *config, cancel context.CancelCauseFunc, cause error) {
	cfg.hooks.lost(work, Event{Op: OpRenew, Resource: k.resource, Token: k.token, Outcome: OutcomeNotHeld, Err: cause, Held: time.Since(k.acquired)})
	cancel(cause)
}
