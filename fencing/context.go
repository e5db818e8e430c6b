package fencing

import (
	"context"
	"time"
)

type (
	tokenKey struct{}
	leaseKey struct{}
)

// ContextWithToken returns a copy of ctx that carries a fencing token. [Locker.Do] and the
// adapters call it for you.
func ContextWithToken(ctx context.Context, token int64) context.Context {
	return context.WithValue(ctx, tokenKey{}, token)
}

// TokenFromContext returns the fencing token ctx carries, put there by [Locker.Do], the Echo
// middleware, the Asynq adapter or [ContextWithToken]. The second result is false when ctx
// carries none.
func TokenFromContext(ctx context.Context) (int64, bool) {
	t, ok := ctx.Value(tokenKey{}).(int64)
	return t, ok
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
