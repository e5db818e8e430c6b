package fencing

import (
	"context"
	"errors"
	"time"

	"github.com/fencekit/fencekit/fencing/observe"
)

// WithHooks adds hooks that observe the Locker's operations (see package observe), as package
// tracing does. Several WithHooks options, of New and of a call alike, add up, in the order
// given: give a set of hooks once. Default: none, and then observation costs nothing.
func WithHooks(h observe.Hooks) CallOption {
	return callOption(func(c *config) {
		if h.Start != nil || h.End != nil || h.Lost != nil {
			c.hooks = append(c.hooks, h)
		}
	})
}

// hookList is the hooks of a Locker or a call.
type hookList []observe.Hooks

// start runs every Start hook and returns the resulting context.
func (hs hookList) start(ctx context.Context, op observe.Op, resource string) context.Context {
	for i := range hs {
		if h := hs[i].Start; h != nil {
			ctx = h(ctx, op, resource)
		}
	}
	return ctx
}

// end runs every End hook, the last added first.
func (hs hookList) end(ctx context.Context, e observe.Event) {
	for i := len(hs) - 1; i >= 0; i-- {
		if h := hs[i].End; h != nil {
			h(ctx, e)
		}
	}
}

// lost runs every Lost hook.
func (hs hookList) lost(ctx context.Context, e observe.Event) {
	for i := len(hs) - 1; i >= 0; i-- {
		if h := hs[i].Lost; h != nil {
			h(ctx, e)
		}
	}
}

// acquired returns the event of an acquisition; a single attempt's busy answer is no error.
func acquired(op observe.Op, resource string, attempts int, begin time.Time, lock *Lock, err error) observe.Event {
	e := observe.Event{Op: op, Resource: resource, Attempts: attempts, Elapsed: time.Since(begin)}
	switch {
	case err == nil && lock != nil:
		e.Outcome, e.Token, e.Label, e.ClockBehind = observe.OutcomeAcquired, lock.token, lock.label, lock.behind
	case err == nil:
		e.Outcome = observe.OutcomeAcquired
	default:
		e.Outcome, e.Err = outcomeOf(err), err
		if e.Outcome == observe.OutcomeBusy && (op == observe.OpTryAcquire || op == observe.OpTryAcquireAll) {
			e.Err = nil
		}
	}
	return e
}

// outcomeOf classifies an error for hooks.
func outcomeOf(err error) observe.Outcome {
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return observe.OutcomeCancelled
	case errors.Is(err, ErrNotHeld):
		return observe.OutcomeNotHeld
	case errors.Is(err, ErrNotAcquired):
		return observe.OutcomeBusy
	}
	return observe.OutcomeError
}
