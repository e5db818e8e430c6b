package fencing

import (
	"context"
	"time"
)

// heldKey is the context key of a *held.
type heldKey struct{}

// held is what a Do, DoAll or Lead (locks) or ContextWithToken (token) put in a context.
type held struct {
	locks []*Lock
	token int64 // ContextWithToken's
	hold  *hold // the hold of the locks (see fencingtest's Stall)
	outer *held
	// single is whether the context holds the lock of one resource only: locks has one, and
	// every enclosing call held the same (a nested call of the Echo middleware).
	single bool
}

// with returns a copy of ctx that carries h, linked to what ctx carries.
func (h *held) with(ctx context.Context) context.Context {
	h.outer, _ = ctx.Value(heldKey{}).(*held)
	if h.locks != nil {
		o := h.outer
		h.single = len(h.locks) == 1 &&
			(o == nil || (o.locks != nil && o.single && o.locks[0].resource == h.locks[0].resource))
	}
	return context.WithValue(ctx, heldKey{}, h)
}

// ContextWithToken returns a copy of ctx that carries a fencing token, which [TokenFromContext]
// returns until a call nested in ctx holds a lock ([Locker.Do] and the adapters put theirs).
func ContextWithToken(ctx context.Context, token int64) context.Context {
	return (&held{token: token}).with(ctx)
}

// TokenFromContext returns the fencing token ctx carries, put there by [Locker.Do], [Locker.DoAll]
// of one resource, [Locker.Lead], the Echo middleware, the Asynq adapter or [ContextWithToken].
// The second result is false when ctx carries none, and when it holds the locks of more than one
// resource (a DoAll of several, nested Do calls of different resources, a Do inside
// ContextWithToken's context), whose tokens come from unrelated counters: use [TokenFor].
func TokenFromContext(ctx context.Context) (int64, bool) {
	h, _ := ctx.Value(heldKey{}).(*held)
	switch {
	case h == nil:
		return 0, false
	case h.locks == nil:
		return h.token, true
	case !h.single:
		return 0, false
	}
	return h.locks[0].token, true
}

// TokenFor returns the fencing token of resource held by the innermost enclosing [Locker.Do],
// [Locker.DoAll] or [Locker.Lead] that holds it, and false when none of them does.
func TokenFor(ctx context.Context, resource string) (int64, bool) {
	for h, _ := ctx.Value(heldKey{}).(*held); h != nil; h = h.outer {
		for _, k := range h.locks {
			if k.resource == resource {
				return k.token, true
			}
		}
	}
	return 0, false
}

// ValidUntilFromContext returns the local end of the lease that the work of [Locker.Do],
// [Locker.DoAll] of one resource or [Locker.Lead] runs under, given its context: the time, by
// this host's monotonic clock, until which the lock is certainly held (renewals move it on; a
// release or a loss, which cancels the context, does not move it back), for work that must not
// act without the lock. The second result is false when ctx comes from none of them, and when
// it holds the locks of more than one resource (as for [TokenFromContext]).
func ValidUntilFromContext(ctx context.Context) (time.Time, bool) {
	h, _ := ctx.Value(heldKey{}).(*held)
	if h == nil || h.locks == nil || !h.single {
		return time.Time{}, false
	}
	return h.locks[0].deadline(), true
}
