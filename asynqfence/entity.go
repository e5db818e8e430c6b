package asynqfence

import (
	"context"
	"errors"

	"github.com/fencekit/fencekit/fencing"
)

// WithEntity gives each task, besides its resource, an entity of its own to lock, named by
// entity: the export, the invoice, the row the task writes. The task runs under both in one
// step: the entity's exclusive lock, then its resource's (a slot of it, with [WithLimit]).
// A tenant allows two exports at once, and each export has its own lock and token:
//
//	mux.Use(asynqfence.Middleware(locker, tenantOf, // "tenant:<id>": at most 2 at once
//		asynqfence.WithLimit(2),
//		asynqfence.WithEntity(func(t *asynq.Task) (string, error) { return "export:" + exportID(t), nil })))
//
// Each is tried once (or waited for, as [WithLockOptions] says): when either is busy, the
// handler does not run, neither is held, and the task is busy ([IsBusy]) with the busy
// one's [fencing.RetryAfter] (the entity's holder's lease, or the earliest end of the slots'
// leases). The entity is taken first, so a second task for an entity that a task is working
// on never takes, even for a moment, a slot that a task for another entity could use. While
// the handler runs both leases are renewed, each every third of the TTL; losing either
// cancels the handler's context with a cause matching [fencing.ErrNotHeld], and the task's
// error then matches it too. Both are released when the handler returns or panics.
//
// The handler's context carries both tokens: [fencing.TokenFor] with each name, and
// [fencing.TokenFromContext] returns the entity's. The entity's token is the one to write
// with: it fences the entity's writes, so that a stalled run of a task for that entity
// cannot write after a later run has. The slot's token only orders the slot's holders: the
// other holders of the resource hold it rightfully at the same time, so it fences nothing of
// any one entity (see docs/limits.md). [fencing.ValidUntilFromContext] reports false there.
//
// entity, like a [ResourceFunc], should be a pure function of the task; its error fails the
// task with [asynq.SkipRetry]. An empty name locks no entity: the task runs under its
// resource alone, as without WithEntity; a task with an entity and no resource ("" from the
// ResourceFunc) runs under its entity's lock alone. An entity's lock is exclusive, whatever
// the limit of the Locker or of WithLimit; WithTTL, the label and WithLockOptions apply to
// both locks. A task whose entity and resource have the same name fails with an error
// wrapping [fencing.ErrInvalid] and [asynq.SkipRetry], and so does every task of
// [MiddlewareAll] given WithEntity (name the entity among the task's resources there).
// Default: nil, no entity.
func WithEntity(entity ResourceFunc) Option {
	return optionFunc(func(c *config) { c.entity = entity })
}

// both runs run under the exclusive lock of entity and then a slot of resource, each taken
// with its options by a Locker.Do nested in the other's (so each is renewed, and released,
// by its own Do, and the loss of either cancels run's context), with the entity's token as
// the context's token. It returns the error of the outer Do.
func (h *handler) both(ctx context.Context, resource, entity string, slotOpts, entityOpts []fencing.CallOption, run func(context.Context) error) error {
	l := h.cfg.locker
	return l.Do(ctx, entity, func(ctx context.Context) error {
		var result error // run's own, before the inner Do adds a loss to it
		ran := false
		err := l.Do(ctx, resource, func(ctx context.Context) error {
			ran = true
			token, _ := fencing.TokenFor(ctx, entity)
			result = run(fencing.ContextWithToken(ctx, token))
			return result
		}, slotOpts...)
		if ran && errors.Is(context.Cause(ctx), fencing.ErrNotHeld) {
			// The entity's lock was lost: the inner Do has joined its cause to run's error,
			// and the outer Do joins it once more; let it join it once.
			return result
		}
		return err
	}, entityOpts...)
}
