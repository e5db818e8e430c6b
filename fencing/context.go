package fencing

import (
	"context"
	"time"
)

type (
	tokenKey struct{}
	leaseKey struct{}
)

// heldKey is the context key of the resources held by the enclosing Do and DoAll calls.
type heldKey struct{}

// several is the value under tokenKey inside a DoAll of several resources: no single token.
type several struct{}

// held is what one Do (resource and token) or one DoAll (set) put in its work's context,
// linked to what the enclosing calls put there.
type held struct {
	resource string
	token    int64
	set      *LockSet
	outer    *held
}

// ContextWithToken returns a copy of ctx that carries a fencing token. [Locker.Do] and the
// adapters call it for you.
func ContextWithToken(ctx context.Context, token int64) context.Context {
	return context.WithValue(ctx, tokenKey{}, token)
}

// TokenFromContext returns the fencing token ctx carries, put there by [Locker.Do], the Echo
// middleware, the Asynq adapter or [ContextWithToken], or by [Locker.DoAll] of one resource.
// The second result is false when ctx carries none, and inside a DoAll of several resources,
// which carries one token per resource: use [TokenFor] there.
func TokenFromContext(ctx context.Context) (int64, bool) {
	t, ok := ctx.Value(tokenKey{}).(int64)
	return t, ok
}

// TokenFor returns the fencing token of resource held by the innermost enclosing
// [Locker.Do] or [Locker.DoAll] that holds it (also when several are nested). The second
// result is false when none of them holds resource.
func TokenFor(ctx context.Context, resource string) (int64, bool) {
	h, _ := ctx.Value(heldKey{}).(*held)
	for ; h != nil; h = h.outer {
		if h.set != nil {
			if t := h.set.Token(resource); t > 0 {
				return t, true
			}
		} else if h.resource == resource {
			return h.token, true
		}
	}
	return 0, false
}

// withHeld returns a copy of ctx that carries lock's token for TokenFromContext and TokenFor.
func withHeld(ctx context.Context, lock *Lock) context.Context {
	outer, _ := ctx.Value(heldKey{}).(*held)
	ctx = context.WithValue(ctx, heldKey{}, &held{resource: lock.resource, token: lock.token, outer: outer})
	return ContextWithToken(ctx, lock.token)
}

// withSet returns a copy of ctx that carries the tokens of set for TokenFor, and for
// TokenFromContext the token of its only lock, or none when it has several.
func withSet(ctx context.Context, set *LockSet) context.Context {
	outer, _ := ctx.Value(heldKey{}).(*held)
	ctx = context.WithValue(ctx, heldKey{}, &held{set: set, outer: outer})
	if len(set.locks) == 1 {
		return ContextWithToken(ctx, set.locks[0].token)
	}
	return context.WithValue(ctx, tokenKey{}, several{})
}

// ValidUntilFromContext returns the local end of the lease that the work of [Locker.Do] or
// [Locker.Lead] runs under, given that work's context: the time, by this host's monotonic
// clock, until which the lock is certainly still held (renewals move it on; a release or a
// loss does not move it back, and the context is cancelled then). Work that must not act
// without the lock, such as the leader of a schedule, checks that enough of it is left before
// each action. The second result is false when ctx comes from neither.
func ValidUntilFromContext(ctx context.Context) (time.Time, bool) {
	k, ok := ctx.Value(leaseKey{}).(*Lock)
	if !ok {
		return time.Time{}, false
	}
	return k.deadline(), true
}
