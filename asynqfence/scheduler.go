package asynqfence

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/hibiken/asynq"
	"github.com/robfig/cron/v3"

	"github.com/fencekit/fencekit/fencing"
)

// A Scheduler enqueues Asynq tasks on cron schedules, like [asynq.Scheduler], from every
// replica of a service at once without duplicates: every replica runs one with the same name
// and entries, they elect a leader with [fencing.Locker.Lead], and only the leader enqueues.
// Each tick is enqueued with a task ID made of the scheduler's name, the entry's ID and the
// tick's time, "asynqfence:<name>:<entry ID>:<tick in Unix seconds>", and a retention that
// outlives a hand-over ([WithRetention]), so that a tick enqueued both by a leader that is just
// losing its lease and by its successor lands once: Asynq answers the second with
// [asynq.ErrTaskIDConflict], which the Scheduler counts as done, not as an error. Each tick's
// task also carries the tick in its [TickHeader] header, which the handler reads with
// [TickOf], also on a retry.
//
// A Scheduler is safe for concurrent use: entries may be registered and unregistered while it
// runs. Make one with [NewScheduler]: the methods of a zero Scheduler, or of a nil one, return
// an error wrapping [fencing.ErrInvalid] (TaskID still names a task ID).
type Scheduler struct {
	client *asynq.Client
	locker *fencing.Locker
	name   string
	cfg    schedulerConfig

	mu      sync.Mutex
	entries map[string]*entry
	changed chan struct{} // closed and replaced when entries change
}

// entry is one registered schedule.
type entry struct {
	id    string
	spec  string
	sched cron.Schedule
	every time.Duration // for "@every": ticks at its multiples since the Unix epoch
	task  *asynq.Task
	opts  []asynq.Option
	queue string
	added time.Time
	loc   *time.Location
}

// NewScheduler returns a Scheduler that enqueues with client while this process leads name on
// l; every replica must use the same name and the same Redis (and prefix) for l. It does not
// talk to Redis and never fails: a nil client or Locker, an empty name or an invalid option is
// reported by [Scheduler.Run], as an error wrapping [fencing.ErrInvalid].
func NewScheduler(client *asynq.Client, l *fencing.Locker, name string, opts ...SchedulerOption) *Scheduler {
	s := &Scheduler{
		client: client, locker: l, name: name,
		cfg:     schedulerConfig{loc: time.UTC, catchUp: -1},
		entries: make(map[string]*entry),
		changed: make(chan struct{}),
	}
	for _, o := range opts {
		if o != nil {
			o.applyScheduler(&s.cfg)
		}
	}
	return s
}

// Register adds an entry that enqueues task on the schedule cronspec, with opts, and returns
// the entry's ID. The spec syntax is asynq.Scheduler's (robfig/cron v3's standard parser):
// five fields (minute, hour, day of month, month, day of week), descriptors such as
// "@hourly" and "@every 30s", and a "CRON_TZ=" prefix; times are in the location of
// [WithLocation] (UTC by default). Unlike asynq.Scheduler, "@every d" ticks at the
// multiples of d since the Unix epoch, not d after the scheduler started, so that every
// replica computes the same ticks.
//
// The entry ID is derived from cronspec, the task's type, payload and headers, and the
// String() of each of opts: replicas that register the same entries get the same IDs, which
// the task IDs depend on. Registering an entry twice is an error. The task ID and retention the Scheduler sets override an
// [asynq.TaskID] or [asynq.Retention] in opts.
//
// Each tick enqueues a new task with task's type, payload and headers, and the tick in the
// header [TickHeader] (which replaces one task may carry). Give the task's options (queue,
// retries, timeout) in opts: options given to asynq.NewTask stay with that task value, which
// is not the one enqueued, so a task made with them is refused.
//
// An invalid cron spec, a nil task, an empty task type or a task made with options returns
// an error wrapping [fencing.ErrInvalid] and registers nothing.
func (s *Scheduler) Register(cronspec string, task *asynq.Task, opts ...asynq.Option) (entryID string, err error) {
	if err := s.made("register"); err != nil {
		return "", err
	}
	if task == nil {
		return "", schedulerInvalid("register: nil task")
	}
	if task.Type() == "" {
		return "", schedulerInvalid("register: empty task type")
	}
	if ownOptions(task) {
		return "", schedulerInvalid(fmt.Sprintf("register: task %q was made with options: give them to Register", task.Type()))
	}
	sched, err := cron.ParseStandard(cronspec)
	if err != nil {
		return "", &ownError{msg: fmt.Sprintf("scheduler: register %q", cronspec), cause: err, is: []error{fencing.ErrInvalid}}
	}
	e := &entry{
		id:    entryID0(cronspec, task, opts),
		spec:  cronspec,
		sched: sched,
		task:  task,
		opts:  slices.Clip(slices.DeleteFunc(slices.Clone(opts), func(o asynq.Option) bool { return o == nil })),
		queue: "default",
		added: time.Now(),
		loc:   s.cfg.loc,
	}
	if c, ok := sched.(cron.ConstantDelaySchedule); ok {
		e.every = c.Delay
	}
	for _, o := range e.opts {
		if o.Type() == asynq.QueueOpt {
			if q, ok := o.Value().(string); ok {
				e.queue = q
			}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, dup := s.entries[e.id]; dup {
		return "", schedulerInvalid(fmt.Sprintf("register %q: entry %s already registered", cronspec, e.id))
	}
	s.entries[e.id] = e
	s.notifyLocked()
	return e.id, nil
}

// Unregister removes the entry with the given ID; a tick of it that is being enqueued
// finishes. An unknown ID returns an error wrapping [fencing.ErrInvalid].
func (s *Scheduler) Unregister(entryID string) error {
	if err := s.made("unregister"); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.entries[entryID]; !ok {
		return schedulerInvalid(fmt.Sprintf("unregister: no entry %q", entryID))
	}
	delete(s.entries, entryID)
	s.notifyLocked()
	return nil
}

// Run campaigns for leadership of the scheduler's name and, while this process leads,
// enqueues every entry's ticks; call it in every replica. It returns ctx.Err() when ctx ends,
// or an error wrapping [fencing.ErrInvalid] (a nil ctx, client or Locker, an empty name, an
// invalid option, a Scheduler not made by NewScheduler) or [fencing.ErrClosed] at once, having enqueued nothing. Redis errors while
// campaigning are retried, as [fencing.Locker.Lead] does; errors while enqueueing go to the
// handler of [WithEnqueueErrorHandler].
//
// When leadership begins, the most recent tick of each entry that came before it is
// enqueued when it is at most the catch-up bound late ([WithCatchUp]; by default its
// period, so the most recent tick always is), never an earlier one: a tick that fell in a
// gap without a leader is enqueued once by the next leader, or not at all. A leader that falls
// behind its ticks (a pause, a wait for its lease) enqueues only the most recent due tick of
// each entry, never a burst. Before every enqueue the leader checks that its lease certainly
// lasts a while more ([fencing.ValidUntilFromContext]): when it does not (Redis cannot be
// reached to renew it), the leader waits for a renewal rather than enqueue while it may no
// longer lead, and each enqueue's context ends with the lease.
func (s *Scheduler) Run(ctx context.Context) error {
	if err := s.made("run"); err != nil {
		return err
	}
	switch {
	case ctx == nil:
		return schedulerInvalid("run: nil context")
	case s.client == nil:
		return schedulerInvalid("run: nil asynq client")
	case s.locker == nil:
		return schedulerInvalid("run: nil locker")
	case s.cfg.err != nil:
		return s.cfg.err
	}
	return s.locker.Lead(ctx, s.name, s.lead, s.cfg.leaderOpts...)
}

// leaseMargin is the least lease the leader must have left to start an enqueue; at most a
// quarter of the lease it started its term with.
const leaseMargin = 500 * time.Millisecond

// leasePoll is how often a leader whose lease is short checks whether it has been renewed.
const leasePoll = 10 * time.Millisecond

// lead is one term of leadership: it enqueues the entries' ticks until ctx ends.
func (s *Scheduler) lead(ctx context.Context) error {
	won := time.Now()
	margin := leaseMargin
	if until, ok := fencing.ValidUntilFromContext(ctx); ok {
		margin = min(margin, time.Until(until)/4)
	}
	last := make(map[string]time.Time) // per entry: the latest tick handled
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		entries, changed := s.snapshot()
		now := time.Now()
		var wake time.Time
		if s.leaseLeft(ctx, now, margin) {
			short := false
			for _, e := range entries {
				l, seen := last[e.id]
				if !seen {
					l = s.start(e, won)
				}
				if tick, ok := e.latestIn(l, now); ok {
					if !s.leaseLeft(ctx, time.Now(), margin) {
						short = true
						last[e.id] = l
						continue
					}
					s.enqueue(ctx, e, tick)
					l = tick
				}
				last[e.id] = l
				if n := e.next(l); wake.IsZero() || n.Before(wake) {
					wake = n
				}
			}
			for id := range last {
				if !slices.ContainsFunc(entries, func(e *entry) bool { return e.id == id }) {
					delete(last, id)
				}
			}
			if short {
				wake = now.Add(leasePoll)
			}
		} else {
			wake = now.Add(leasePoll) // wait for a renewal, or for the loss
		}
		var tc <-chan time.Time
		if !wake.IsZero() {
			timer.Reset(time.Until(wake))
			tc = timer.C
		}
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-changed:
			timer.Stop()
		case <-tc:
		}
	}
}

// start returns the tick after which an entry's ticks are due in a term won at won: the
// catch-up tick, if any, is due.
func (s *Scheduler) start(e *entry, won time.Time) time.Time {
	if e.added.After(won) {
		return e.added // registered during the term: no catch-up
	}
	tick, ok := e.latest(won)
	if !ok || s.cfg.catchUp == 0 || (s.cfg.catchUp > 0 && won.Sub(tick) > s.cfg.catchUp) {
		return won
	}
	return tick.Add(-time.Nanosecond)
}

// leaseLeft reports whether the term's lease lasts at least margin more.
func (s *Scheduler) leaseLeft(ctx context.Context, now time.Time, margin time.Duration) bool {
	if ctx.Err() != nil {
		return false
	}
	until, ok := fencing.ValidUntilFromContext(ctx)
	return !ok || until.Sub(now) >= margin
}

// snapshot returns the entries, in ID order, and the channel closed when they change.
func (s *Scheduler) snapshot() ([]*entry, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	es := make([]*entry, 0, len(s.entries))
	for _, e := range s.entries {
		es = append(es, e)
	}
	sort.Slice(es, func(i, j int) bool { return es[i].id < es[j].id })
	return es, s.changed
}

func (s *Scheduler) notifyLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// TaskID returns the Asynq task ID of an entry's tick: "asynqfence:<name>:<entry
// ID>:<tick in Unix seconds>".
func (s *Scheduler) TaskID(entryID string, tick time.Time) string {
	name := ""
	if s != nil {
		name = s.name
	}
	return fmt.Sprintf("asynqfence:%s:%s:%d", name, entryID, tick.Unix())
}

// made returns an error wrapping [fencing.ErrInvalid] for a nil Scheduler or one not made by
// NewScheduler (a zero Scheduler has no entries to register into), naming op.
func (s *Scheduler) made(op string) error {
	if s == nil || s.entries == nil {
		return schedulerInvalid(op + ": Scheduler not made by NewScheduler")
	}
	return nil
}

// enqueue enqueues one tick of e, bounded by the term's lease.
func (s *Scheduler) enqueue(ctx context.Context, e *entry, tick time.Time) {
	id := s.TaskID(e.id, tick)
	retention := s.cfg.retention
	if retention == 0 {
		period := e.next(tick).Sub(tick)
		retention = max(2*period+time.Minute, 5*time.Minute)
	}
	opts := append(e.opts, asynq.TaskID(id), asynq.Retention(retention))
	task := e.taskFor(tick)
	ectx := ctx
	if until, ok := fencing.ValidUntilFromContext(ctx); ok {
		var cancel context.CancelFunc
		ectx, cancel = context.WithDeadline(ctx, until)
		defer cancel()
	}
	ev := EnqueueEvent{Scheduler: s.name, EntryID: e.id, TaskID: id, Queue: e.queue, Task: task, Tick: tick}
	for _, h := range s.cfg.hooks {
		if h.Start != nil {
			ectx = h.Start(ectx, ev)
		}
	}
	begin := time.Now()
	info, err := s.client.EnqueueContext(ectx, task, opts...)
	ev.Info, ev.Err, ev.Elapsed = info, err, time.Since(begin)
	if errors.Is(err, asynq.ErrTaskIDConflict) {
		ev.Duplicate, ev.Err = true, nil
	}
	for i := len(s.cfg.hooks) - 1; i >= 0; i-- {
		if h := s.cfg.hooks[i].End; h != nil {
			h(ectx, ev)
		}
	}
	if ev.Err != nil && ectx.Err() == nil && s.cfg.onError != nil {
		s.cfg.onError(task, opts, err)
	}
}

// next returns the entry's first tick after t.
func (e *entry) next(t time.Time) time.Time {
	if e.every > 0 {
		d := e.every.Nanoseconds()
		n := t.UnixNano()
		k := n / d
		if n < 0 && n%d != 0 {
			k--
		}
		return time.Unix(0, (k+1)*d).In(e.loc)
	}
	return e.sched.Next(t.In(e.loc))
}

// latestIn returns the entry's latest tick in (after, until], if any.
func (e *entry) latestIn(after, until time.Time) (time.Time, bool) {
	t := e.next(after)
	if t.IsZero() || t.After(until) {
		return time.Time{}, false
	}
	for {
		n := e.next(t)
		if n.IsZero() || n.After(until) {
			return t, true
		}
		t = n
	}
}

// latest returns the entry's latest tick at or before t, looking back up to about five years.
func (e *entry) latest(t time.Time) (time.Time, bool) {
	for back := time.Minute; back < 5*366*24*time.Hour; back *= 2 {
		if tick, ok := e.latestIn(t.Add(-back), t); ok {
			return tick, true
		}
	}
	return time.Time{}, false
}

// entryID0 derives an entry's ID from what defines it: the first 16 bytes, in hex, of a
// SHA-256 over the spec, the task's type, payload and headers, and the options' strings.
func entryID0(spec string, task *asynq.Task, opts []asynq.Option) string {
	h := sha256.New()
	field := func(s string) {
		fmt.Fprintf(h, "%d:%s;", len(s), s)
	}
	field(spec)
	field(task.Type())
	field(string(task.Payload()))
	headers := task.Headers()
	keys := make([]string, 0, len(headers))
	for k := range headers {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		field(k)
		field(headers[k])
	}
	for _, o := range opts {
		if o != nil {
			field(o.String())
		}
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// schedulerInvalid returns an error reading "asynqfence: scheduler: <msg>" that matches
// fencing.ErrInvalid.
func schedulerInvalid(msg string) error {
	return &ownError{msg: "scheduler: " + msg, is: []error{fencing.ErrInvalid}}
}
