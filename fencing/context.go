package fencing

import "context"

type tokenKey struct{}

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
