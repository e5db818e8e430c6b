package fencing

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencekit/fencekit/fencing/observe"
)

// The causes of a lost lock.
var (
	errLeaseLapsed = fmt.Errorf("%w: lease ran out before a renewal succeeded", ErrNotHeld)
	errTaken       = fmt.Errorf("%w: renewal found the lock taken or expired", ErrNotHeld)
)

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

// startRenewer starts renewing locks every ttl/3 with extend until stop.
func startRenewer(work context.Context, cfg *config, locks []*Lock, extend func(context.Context, time.Duration) []error, cancelOf func(*Lock) context.CancelCauseFunc) *renewer {
	ttl := time.Duration(millis(cfg.ttl)) * time.Millisecond
	r := &renewer{locks: locks, extend: extend, cancelOf: cancelOf, work: work, cfg: cfg, ttl: ttl,
		interval: max(ttl/3, time.Millisecond), retry: max(ttl/20, time.Millisecond)}
	for _, k := range locks {
		k.stopLater() // the renewals extend a grant's short lease
	}
	r.mu.Lock()
	// A grant's lease may be shorter than the TTL: renew within a third of what is left of it.
	first, _ := r.earliest()
	r.timer = time.AfterFunc(min(r.interval, time.Until(first)/3), r.run)
	r.lapse = time.AfterFunc(time.Until(first), r.lapsed)
	r.mu.Unlock()
	return r
}

// earliest returns the earliest local end of the leases, and its lock.
func (r *renewer) earliest() (first time.Time, which *Lock) {
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

// begin reports whether a timer's callback may run (not stopped), and then counts it running.
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

// lapsed runs at the earliest lease's local end: unless a renewal moved it, it cancels the work,
// without waiting for a renewal that an unresponsive server holds up (go-redis bounds socket
// reads by ReadTimeout, not by the context, unless ContextTimeoutEnabled is set).
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

// lose tells the hooks of the loss of k and cancels the work, once.
func (r *renewer) lose(k *Lock, cause error) {
	if r.lost.CompareAndSwap(false, true) {
		k.lost(r.work, r.cfg.hooks, observe.OpRenew, cause)
		r.cancelOf(k)(cause)
	}
}

// renew extends every lease once and returns when to renew next, or false when a lock is lost.
func (r *renewer) renew() (time.Duration, bool) {
	first, k := r.earliest()
	if !time.Now().Before(first) {
		r.lose(k, errLeaseLapsed)
		return 0, false
	}
	rctx, rcancel := context.WithDeadline(context.WithoutCancel(r.work), first)
	errs := r.extend(rctx, r.ttl)
	rcancel()
	transient := false
	for i, err := range errs {
		switch {
		case err == nil:
		case errors.Is(err, ErrNotHeld):
			r.lose(r.locks[i], errTaken)
			return 0, false
		default:
			transient = true
		}
	}
	if !transient {
		return r.interval, true
	}
	first, k = r.earliest() // transient: retry soon while the earliest lease lasts
	wait := time.Until(first)
	if wait <= 0 {
		r.lose(k, errLeaseLapsed)
		return 0, false
	}
	return min(r.retry, wait), true
}

// lost tells hs, with the work's ctx, that op found k lost with err.
func (k *Lock) lost(ctx context.Context, hs hookList, op observe.Op, err error) {
	hs.lost(ctx, observe.Event{Op: op, Resource: k.resource, Token: k.token, Label: k.label, Outcome: observe.OutcomeNotHeld, Err: err, Held: time.Since(k.acquired)})
}
