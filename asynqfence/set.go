package asynqfence

import (
	"context"
	"errors"
	"fmt"

	"github.com/hibiken/asynq"

	"github.com/fencekit/fencekit/fencing"
)

// A ResourcesFunc returns the names of the resources a task must lock together, such as
// both accounts of a transfer, derived from the task's type and payload (and headers), or
// none when the task needs no lock. Duplicates are locked once. As for a [ResourceFunc], it
// should be a pure function of the task: when it returns an error, the task fails with
// [asynq.SkipRetry]; an invalid name or more than [fencing.MaxResources] fail with an error
// wrapping [fencing.ErrInvalid] and [asynq.SkipRetry].
type ResourcesFunc func(t *asynq.Task) ([]string, error)

// MiddlewareAll returns middleware for [asynq.ServeMux.Use] that runs every handler of the
// mux while holding the locks of all the task's resources, named by resources, taken together
// with [fencing.Locker.DoAll]: in one canonical order, so that tasks locking overlapping sets
// in any order never deadlock, each resource with its own token ([fencing.TokenFor] in the
// handler's context; [fencing.TokenFromContext] gives the token only when there is one
// resource). The handler's context is cancelled when any of the locks is lost. The results
// are those of [Wrap]; a busy error ([IsBusy]) names the resource that was busy. Return no
// names for task types you do not lock, and they pass straight through.
func MiddlewareAll(l *fencing.Locker, resources ResourcesFunc, opts ...Option) asynq.MiddlewareFunc {
	cfg := newConfig(l, nil, resources, opts)
	if resources == nil && errors.Is(cfg.err, fencing.ErrInvalid) && cfg.locker != nil {
		cfg.err = invalid("nil ResourcesFunc")
	}
	return func(next asynq.Handler) asynq.Handler { return &handler{next: next, cfg: cfg} }
}

// processAll is ProcessTask for MiddlewareAll.
func (h *handler) processAll(ctx context.Context, t *asynq.Task) error {
	resources, err := h.cfg.all(t)
	switch {
	case err != nil:
		return &ownError{msg: fmt.Sprintf("resources of task %q", t.Type()), cause: err, is: []error{asynq.SkipRetry}}
	case len(resources) == 0:
		return h.next.ProcessTask(ctx, t)
	}
	ran, succeeded := false, false
	err = h.cfg.locker.DoAll(ctx, resources, func(ctx context.Context) error {
		ran = true
		err := h.next.ProcessTask(ctx, t)
		succeeded = err == nil
		return err
	}, labelled(taskLabel(ctx, t), h.cfg.opts)...)
	return h.outcome(err, ran, succeeded)
}
