package fencing

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencekit/fencekit/internal/seam"
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
	if call := seam.CallFrom(ctx); call != nil {
		k := cfg.keys(resource)
		call.LockKey, call.FenceKey, call.GuardKey = k.lock, k.fence, ""
		if call.Guard != "" {
			call.GuardKey = k.beside(call.Guard)
		}
	}
	lock, err := l.acquire(ctx, cfg, resource)
	if err != nil {
		return err
	}
	return l.hold(ctx, cfg, lock, fn)
}

// hold is Do once the lock is taken: it runs fn under lock, renewing it, and releases it.
func (l *Locker) hold(ctx context.Context, cfg *config, lock *Lock, fn func(ctx context.Context) error) (err error) {
	call := seam.CallFrom(ctx)
	work, cancel := context.WithCancelCause(withHeld(context.WithValue(ctx, leaseKey{}, lock), lock))
	if call != nil {
		work = seam.WithCall(work, nil) // a Do nested in the work is a plain one
	}
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
		var rerr error
		if call != nil && call.BeforeRelease != nil {
			rerr = lock.releaseWith(rctx, call.BeforeRelease)
		} else {
			rerr = lock.Release(rctx)
		}
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

// renewer renews leases from a timer: no goroutine runs between renewals. It keeps one lock
// (Do) or the locks of a set (DoAll, renewed together); losing any of them cancels the work.
type renewer struct {
	locks    []*Lock
	extend   func(ctx context.Context, ttl time.Duration) []error // renews every lock, one error each
	cancelOf func(k *Lock) context.CancelCauseFunc                // cancels the work for the loss of k
	work     context.Context
	cfg      *config
	ttl      time.Duration
	interval time.Duration // between successful renewals: a third of the TTL
	retry    time.Duration // after a transient error

	mu      sync.Mutex
	stopped bool
	timer   *time.Timer
	lapse   *time.Timer    // fires at the earliest local end of a lease, even while a renewal is stuck
	running sync.WaitGroup // a renewal or lapse check in progress
	lost    atomic.Bool    // the work was cancelled
}

// keepAlive starts renewing the lease every ttl/3 until stop, and cancels the work with an
// ErrNotHeld cause when the lock is lost or its validity runs out.
func (k *Lock) keepAlive(work context.Context, cfg *config, cancel context.CancelCauseFunc) *renewer {
	extend := func(ctx context.Context, ttl time.Duration) []error { return []error{k.extend(ctx, ttl, OpRenew)} }
	return startRenewer(work, cfg, []*Lock{k}, extend, func(*Lock) context.CancelCauseFunc { return cancel })
}

// startRenewer starts renewing locks every ttl/3 with extend until stop.
func startRenewer(work context.Context, cfg *config, locks []*Lock, extend func(context.Context, time.Duration) []error, cancelOf func(*Lock) context.CancelCauseFunc) *renewer {
	ttl := time.Duration(millis(cfg.ttl)) * time.Millisecond
	r := &renewer{
		locks: locks, extend: extend, cancelOf: cancelOf, work: work, cfg: cfg, ttl: ttl,
		interval: max(ttl/3, time.Millisecond),
		retry:    max(ttl/20, time.Millisecond),
	}
	for _, k := range locks {
		k.stopLater() // the renewals extend a grant's short lease
	}
	r.mu.Lock()
	// A lock granted from the queue may start with a lease shorter than the TTL (see
	// grantLease): the first renewal comes within a third of what is left of it.
	first, _ := r.earliest()
	r.timer = time.AfterFunc(min(r.interval, time.Until(first)/3), r.run)
	r.lapse = time.AfterFunc(time.Until(first), r.lapsed)
	r.mu.Unlock()
	return r
}

// earliest returns the earliest local end of the leases, and its lock.
func (r *renewer) earliest() (time.Time, *Lock) {
	var first time.Time
	var which *Lock
	for _, k := range r.locks {
		if d := k.deadline(); which == nil || d.Before(first) {
			first, which = d, k
		}
	}
	return first, which
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

// begin reports whether a timer's callback may run (the renewer is not stopped), and then
// counts it as running.
func (r *renewer) begin() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped {
		return false
	}
	r.running.Add(1)
	return true
}

// reset sets t to fire after d unless the renewer is stopped.
func (r *renewer) reset(t *time.Timer, d time.Duration) {
	r.mu.Lock()
	if !r.stopped {
		t.Reset(d)
	}
	r.mu.Unlock()
}

// run is one renewal; it schedules the next unless a lock is lost.
func (r *renewer) run() {
	if !r.begin() {
		return
	}
	defer r.running.Done()
	next, ok := r.renew()
	if !ok || r.lost.Load() {
		return
	}
	r.reset(r.timer, next)
}

// lapsed runs at the earliest lease's local end: unless a renewal moved the end meanwhile, it
// cancels the work, without waiting for a renewal that an unresponsive server holds up
// (go-redis bounds socket reads by ReadTimeout, not by the context, unless
// ContextTimeoutEnabled is set).
func (r *renewer) lapsed() {
	if !r.begin() {
		return
	}
	defer r.running.Done()
	first, k := r.earliest()
	if wait := time.Until(first); wait > 0 {
		r.reset(r.lapse, wait)
		return
	}
	r.lose(k, errLeaseLapsed)
}

// lose cancels the work once, for the loss of k.
func (r *renewer) lose(k *Lock, cause error) {
	if r.lost.CompareAndSwap(false, true) {
		k.lose(r.work, r.cfg, r.cancelOf(k), cause)
	}
}

// renew extends every lease once and returns when to renew next, or false when the work was
// cancelled because a lock is lost.
func (r *renewer) renew() (time.Duration, bool) {
	first, k := r.earliest()
	if !time.Now().Before(first) {
		r.lose(k, errLeaseLapsed)
		return 0, false
	}
	// The renewal may take no longer than the earliest lease has left.
	rctx, rcancel := context.WithDeadline(context.WithoutCancel(r.work), first)
	errs := r.extend(rctx, r.ttl)
	rcancel()
	transient := false
	for i, err := range errs {
		switch {
		case err == nil:
		case errors.Is(err, ErrNotHeld):
			r.lose(r.locks[i], fmt.Errorf("%w: %w", ErrNotHeld, errors.New("renewal found the lock taken or expired")))
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

// lose reports the loss to the hooks, then cancels the work.
func (k *Lock) lose(work context.Context, cfg *config, cancel context.CancelCauseFunc, cause error) {
	cfg.hooks.lost(work, Event{Op: OpRenew, Resource: k.resource, Token: k.token, Outcome: OutcomeNotHeld, Err: cause, Held: time.Since(k.acquired)})
	cancel(cause)
}
