package asynqfence

import (
	"context"
	"errors"
	"fmt"

	"github.com/hibiken/asynq"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/internal/label"
	"github.com/fencekit/fencekit/store"
)

// A ResourceFunc returns the name of the resource a task must lock, derived from the task's
// type and payload (and headers), or "" when the task needs no lock. It should be a pure
// function of the task: when it returns an error, the task fails with [asynq.SkipRetry] and
// is archived without retries. Names longer than [fencing.MaxResourceLen] bytes are
// rejected: the task then fails with an error wrapping [fencing.ErrInvalid] and
// [asynq.SkipRetry].
type ResourceFunc func(t *asynq.Task) (string, error)

// Middleware returns middleware for [asynq.ServeMux.Use] that runs every handler of the mux
// as [Wrap] does. The mux runs it around its not-found handler too: return "" from resource
// for task types you do not lock, and they pass straight through.
func Middleware(l *fencing.Locker, resource ResourceFunc, opts ...Option) asynq.MiddlewareFunc {
	cfg := newConfig(l, resource, nil, opts)
	// The mux calls this for every task: it only pairs the handler with the shared config.
	return func(next asynq.Handler) asynq.Handler { return &handler{next: next, cfg: cfg} }
}

// Wrap returns a handler that runs h while holding the lock on the task's resource, named
// by resource, with the fencing token in h's context ([fencing.TokenFromContext]); with
// [WithEntity], also the task's entity's own lock, whose token it is then. Every acquisition
// is labelled with the task's ID ([fencing.WithLabel], shown by [fencing.Locker.Inspect]):
// asynq.GetTaskID of the handler's context, fitted to a label when it is longer than
// [fencing.MaxLabelLen] bytes (a custom [asynq.TaskID]: its start and its end, joined by
// "…") or has control characters, never failing the task; a fencing.WithLabel in
// [WithLockOptions] labels them instead. The returned handler is safe for concurrent use.
// Its ProcessTask returns:
//   - nil when h ran and returned nil, even if the lease lapsed meanwhile or could not be
//     released (it then runs out by itself): the task is done, and the fenced store has
//     accepted or rejected each of its writes, so running it again would only repeat them;
//   - h's error when h ran and failed, joined with [fencing.ErrNotHeld] when the lock was
//     lost meanwhile (h's context was then cancelled with that cause), and also when h's
//     error matches store.ErrStaleToken (a store refused a write because a newer holder's
//     token had passed the task's: the lock was lost, whether or not a renewal had noticed
//     it yet); such an error is an ordinary failure, retried as Asynq retries failures;
//   - a busy error ([IsBusy]) that matches [fencing.ErrNotAcquired] when another owner holds
//     the lock (see [IsFailure] and [RetryDelay]), also wrapping [asynq.RevokeTask] under
//     [WithDropDuplicates];
//   - resource's error wrapped with [asynq.SkipRetry];
//   - an error wrapping both [fencing.ErrInvalid] and [asynq.SkipRetry] when the setup
//     cannot work, the same way for every attempt: a nil Locker, resource or h, an invalid
//     option or TTL, a Locker built with invalid options (its [fencing.Locker.Err], checked
//     when Wrap or Middleware is called), or a resource name longer than
//     [fencing.MaxResourceLen]; Asynq then archives the task at once instead of retrying it;
//     a Locker already closed when Wrap or Middleware is called gives an error wrapping
//     [fencing.ErrClosed] and [asynq.SkipRetry] the same way;
//   - otherwise an error from the Locker, such as an unreachable Redis or a closed Locker
//     (an ordinary failure, retried).
//
// The Locker's errors come back as they are, their text starting "fencing: ", with
// [asynq.SkipRetry] or [asynq.RevokeTask] joined after them where the adapter adds it
// ("fencing: ...: skip retry for the task"); the errors the adapter makes itself start with
// "asynqfence: ", once, and never carry another fencekit package's text. When resource
// returns "", h runs without a lock. Wrap never panics.
func Wrap(h asynq.Handler, l *fencing.Locker, resource ResourceFunc, opts ...Option) asynq.Handler {
	return &handler{next: h, cfg: newConfig(l, resource, nil, opts)}
}

func newConfig(l *fencing.Locker, resource ResourceFunc, all ResourcesFunc, opts []Option) *config {
	cfg := &config{locker: l, resource: resource, all: all}
	for _, o := range opts {
		if o != nil {
			o.apply(cfg)
		}
	}
	switch {
	case cfg.err != nil:
	case l == nil:
		cfg.err = invalid("nil Locker")
	case resource == nil && all == nil:
		cfg.err = invalid("nil ResourceFunc")
	case cfg.shared != nil && cfg.limit > 1:
		cfg.err = invalid(fmt.Sprintf("WithShared with WithLimit(%d): a resource is shared or limited, not both", cfg.limit))
	case cfg.shared != nil && all != nil:
		cfg.err = invalid("WithShared with MiddlewareAll: several resources are locked exclusively")
	case cfg.entity != nil && all != nil:
		cfg.err = invalid("WithEntity with MiddlewareAll: name the entity among the task's resources")
	default:
		// A Locker built with options that can never work, or already closed, is refused
		// here, where the adapter is built: every task fails the same way, without retries.
		if err := l.Err(); err != nil {
			cfg.err = fmt.Errorf("%w: %w", err, asynq.SkipRetry)
		}
	}
	cfg.opts = cfg.lockOptions()
	if cfg.shared != nil {
		cfg.sharedOpts = append(cfg.opts[:len(cfg.opts):len(cfg.opts)], fencing.Shared())
	}
	if cfg.entity != nil {
		cfg.entityOpts = append(cfg.opts[:len(cfg.opts):len(cfg.opts)], exclusive)
	}
	return cfg
}

type handler struct {
	next asynq.Handler
	cfg  *config
}

// ProcessTask implements [asynq.Handler]; see [Wrap].
func (h *handler) ProcessTask(ctx context.Context, t *asynq.Task) error {
	switch {
	case h.cfg.err != nil:
		return h.cfg.err
	case h.next == nil:
		return invalid("nil handler")
	case t == nil:
		return invalid("nil task")
	case h.cfg.all != nil:
		return h.processAll(ctx, t)
	}
	resource, err := h.cfg.resource(t)
	if err != nil {
		return &ownError{msg: fmt.Sprintf("resource of task %q", t.Type()), cause: err, is: []error{asynq.SkipRetry}}
	}
	entity := ""
	if h.cfg.entity != nil {
		if entity, err = h.cfg.entity(t); err != nil {
			return &ownError{msg: fmt.Sprintf("entity of task %q", t.Type()), cause: err, is: []error{asynq.SkipRetry}}
		}
		if entity != "" && entity == resource {
			return invalid(fmt.Sprintf("task %q names %q as its resource and its entity", t.Type(), resource))
		}
	}
	if resource == "" && entity == "" {
		return h.next.ProcessTask(ctx, t)
	}
	opts := h.cfg.opts
	if h.cfg.shared != nil && h.cfg.shared(t) {
		opts = h.cfg.sharedOpts
	}
	label := taskLabel(ctx, t)
	ran, succeeded := false, false
	run := func(ctx context.Context) error {
		ran = true
		err := h.next.ProcessTask(ctx, t)
		succeeded = err == nil
		return err
	}
	switch {
	case entity == "":
		err = h.cfg.locker.Do(ctx, resource, run, labelled(label, opts)...)
	case resource == "":
		err = h.cfg.locker.Do(ctx, entity, run, labelled(label, h.cfg.entityOpts)...)
	default:
		err = h.both(ctx, resource, entity, labelled(label, opts), labelled(label, h.cfg.entityOpts), run)
	}
	return h.outcome(err, ran, succeeded)
}

// outcome returns the result of a task given the Locker call's error, whether the handler
// ran and whether it succeeded.
func (h *handler) outcome(err error, ran, succeeded bool) error {
	switch {
	case succeeded:
		// A lease that lapsed after the handler's last write, or a failed release, must not
		// make Asynq run a finished task again: the store has ruled on every write.
		return nil
	case ran || err == nil:
		return lost(err)
	case errors.Is(err, fencing.ErrNotAcquired):
		busy := &busyError{err: err}
		if h.cfg.drop {
			return fmt.Errorf("%w: %w", busy, asynq.RevokeTask)
		}
		return busy
	case errors.Is(err, fencing.ErrInvalid):
		// An oversized name or an invalid lock option fails the same way every time.
		return fmt.Errorf("%w: %w", err, asynq.SkipRetry)
	}
	return err
}

// taskLabel returns the label of a task's acquisitions: its ID, fitted to a label, or "".
func taskLabel(ctx context.Context, t *asynq.Task) string {
	id, ok := asynq.GetTaskID(ctx)
	if !ok {
		if w := t.ResultWriter(); w != nil {
			id = w.TaskID()
		}
	}
	return label.Fit(id)
}

// labelled returns opts after fencing.WithLabel(label), so that a label of opts (from
// WithLockOptions) wins; opts itself when label is "".
func labelled(label string, opts []fencing.CallOption) []fencing.CallOption {
	if label == "" {
		return opts
	}
	return append([]fencing.CallOption{fencing.WithLabel(label)}, opts...)
}

// lost returns the error of a handler that ran under the lock: err as it is, or, when err
// matches store.ErrStaleToken but not yet [fencing.ErrNotHeld], the same error (its text
// unchanged) matching both. A store that refused a write because a newer holder's token had
// passed the task's says that the lock was lost, whether or not a renewal had noticed it yet
// (Do joins the handler's error with ErrNotHeld when it had): the task fails as after any
// lost lock, an ordinary failure that Asynq retries, with an error that tells it apart.
func lost(err error) error {
	if err == nil || errors.Is(err, fencing.ErrNotHeld) || !errors.Is(err, store.ErrStaleToken) {
		return err
	}
	return &lostError{err: err}
}

// invalid returns the error of an unusable setup: it matches [fencing.ErrInvalid] and
// [asynq.SkipRetry], since retrying cannot make it work.
func invalid(what string) error {
	return &ownError{msg: what, is: []error{fencing.ErrInvalid, asynq.SkipRetry}}
}
