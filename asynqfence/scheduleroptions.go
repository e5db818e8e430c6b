package asynqfence

import (
	"context"
	"fmt"
	"time"

	"github.com/hibiken/asynq"

	"github.com/fencekit/fencekit/fencing"
)

// A SchedulerOption configures [NewScheduler].
type SchedulerOption interface {
	applyScheduler(*schedulerConfig)
}

type schedulerOptionFunc func(*schedulerConfig)

func (f schedulerOptionFunc) applyScheduler(c *schedulerConfig) { f(c) }

// schedulerConfig is a Scheduler's settings; not modified after NewScheduler returns.
type schedulerConfig struct {
	loc        *time.Location
	catchUp    time.Duration // < 0: one period
	retention  time.Duration // 0: from the period
	leaderOpts []fencing.CallOption
	onError    func(task *asynq.Task, opts []asynq.Option, err error)
	hooks      []SchedulerHooks
	err        error // the first invalid option, returned by Run
}

func (c *schedulerConfig) invalid(msg string) {
	if c.err == nil {
		c.err = schedulerInvalid(msg)
	}
}

// WithLocation sets the time zone of the cron specs (a spec's own "CRON_TZ=" prefix wins).
// Default: UTC, as asynq.Scheduler. A nil location means UTC. Every replica must use the same.
func WithLocation(loc *time.Location) SchedulerOption {
	return schedulerOptionFunc(func(c *schedulerConfig) {
		if loc == nil {
			loc = time.UTC
		}
		c.loc = loc
	})
}

// WithCatchUp bounds the catch-up when leadership begins: the most recent tick of an entry
// that came before the term is enqueued when it is at most d late, and no earlier tick ever
// is. WithCatchUp(0) turns catch-up off: a new leader enqueues only the ticks that come after
// it won. Default: one period of the entry (the time from that tick to the next), so the most
// recent tick before the term is always enqueued, unless a leader already did (its task ID
// then conflicts). A negative d makes Run return an error wrapping [fencing.ErrInvalid].
func WithCatchUp(d time.Duration) SchedulerOption {
	return schedulerOptionFunc(func(c *schedulerConfig) {
		if d < 0 {
			c.invalid(fmt.Sprintf("catch-up %v", d))
		}
		c.catchUp = d
	})
}

// WithRetention sets how long Asynq keeps a tick's task after it is processed, which is how
// long its task ID keeps a second enqueue of the same tick out. Default: twice the entry's
// period plus a minute, and at least 5 minutes; a shorter retention than the catch-up bound
// plus the time a task takes can let a new leader enqueue a tick that was already processed.
// A d that is not positive makes Run return an error wrapping [fencing.ErrInvalid].
func WithRetention(d time.Duration) SchedulerOption {
	return schedulerOptionFunc(func(c *schedulerConfig) {
		if d <= 0 {
			c.invalid(fmt.Sprintf("retention %v", d))
		}
		c.retention = d
	})
}

// WithLeaderOptions adds options to every campaign and term of [fencing.Locker.Lead], such
// as [fencing.WithTTL] (the lease: how long a dead leader's ticks wait for a successor).
// Several add up. Default: none; the Locker's settings apply.
//
// Hooks add up with the Locker's: hooks given to [fencing.New] already observe every
// campaign and term, so giving the same hooks here too (tracing.Hooks, say) reports each one
// twice. Give tracing hooks once, to the Locker; [fencing.WithHooks] here is for hooks that
// only the scheduler's leadership should have.
func WithLeaderOptions(opts ...fencing.CallOption) SchedulerOption {
	return schedulerOptionFunc(func(c *schedulerConfig) { c.leaderOpts = append(c.leaderOpts, opts...) })
}

// WithEnqueueErrorHandler sets a function called, on the Run goroutine, when enqueueing a
// tick fails, with the task (the tick in its [TickHeader]), the options it was enqueued with (the task ID and retention
// included) and the error; a tick whose task ID conflicts is not a failure, nor is an enqueue
// cut short because the leadership or Run's context ended (the next leader enqueues that tick
// within the catch-up bound; the hooks still see its error). The tick is not retried.
// Default: none.
func WithEnqueueErrorHandler(h func(task *asynq.Task, opts []asynq.Option, err error)) SchedulerOption {
	return schedulerOptionFunc(func(c *schedulerConfig) { c.onError = h })
}

// WithSchedulerHooks adds hooks that observe every tick the leader enqueues; the
// tracing/asynqtrace package uses this seam. Several add up; Start hooks run in the order
// given, End hooks in reverse. Default: none.
func WithSchedulerHooks(h SchedulerHooks) SchedulerOption {
	return schedulerOptionFunc(func(c *schedulerConfig) {
		if h.Start != nil || h.End != nil {
			c.hooks = append(c.hooks, h)
		}
	})
}

// SchedulerHooks observe a [Scheduler]'s enqueues; either field may be nil. They run
// synchronously on the Run goroutine, so they must be quick.
type SchedulerHooks struct {
	// Start is called before a tick is enqueued, with the term's context (cancelled when
	// leadership is lost, bounded by the lease) and the event so far (Info, Err, Duplicate
	// and Elapsed not yet set). The context it returns is used for the enqueue and passed
	// to End.
	Start func(ctx context.Context, e EnqueueEvent) context.Context
	// End is called when the enqueue returns.
	End func(ctx context.Context, e EnqueueEvent)
}

// An EnqueueEvent describes one tick's enqueue.
type EnqueueEvent struct {
	Scheduler string      // the scheduler's name
	EntryID   string      // the entry's ID, as Register returned it
	TaskID    string      // the tick's task ID
	Queue     string      // the queue of the entry's options, "default" without one
	Task      *asynq.Task // the task enqueued: the entry's task with the tick in its TickHeader
	Tick      time.Time   // the tick's scheduled time
	// Duplicate is true when the tick had already been enqueued (Asynq answered
	// asynq.ErrTaskIDConflict): not an error.
	Duplicate bool
	// Info is Asynq's answer when the task was enqueued, nil otherwise.
	Info *asynq.TaskInfo
	// Err is the enqueue's error; nil when enqueued, and for a duplicate.
	Err     error
	Elapsed time.Duration
}
