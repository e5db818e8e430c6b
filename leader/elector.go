// Package leader answers, from memory, whether this process leads a name now: the question
// that a scheduler running in every replica asks before each run of a job. An [Elector]
// campaigns with [fencing.Locker.Lead] and keeps the term's fencing token, its epoch, for the
// job's writes.
//
// Its method set satisfies the Elector interface of github.com/go-co-op/gocron/v2
// (IsLeader(context.Context) error), without this package importing gocron; package
// cronfence gives it to robfig/cron. Every replica runs:
//
//	elector := leader.New(locker, "nightly-settlement")
//	go elector.Run(ctx) // returns when ctx ends
//	s, err := gocron.NewScheduler(gocron.WithDistributedElector(elector))
//	// in the job:
//	epoch, ok := elector.Token()
//	if !ok {
//		return // leadership ended since gocron asked
//	}
//	// write with epoch; the store refuses writes below the highest epoch it has seen
//
// One leader at a time is not one run per tick. Each replica's scheduler fires a tick by its
// own clock, so when leadership moves (a leader that shuts down resigns, and the next
// candidate leads within a round trip) between two replicas' timers for the same tick, both
// may run it; and ticks that fall while no process leads (a dead leader's lease running out)
// are not run by anyone. Fence the job's writes with the token, and make a run idempotent
// per tick where a second run matters. [fencing.Locker.Lead]'s guarantees and limits apply: a
// leader paused past its lease can still act once it wakes, before it looks, which only the
// token stops.
//
// Errors of this package read `leader: elector "<name>": <cause>`; the errors of
// [fencing.Locker.Lead] that [Elector.Run] returns are package fencing's own.
package leader

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/fencekit/fencekit/fencing"
)

// ErrNotLeader means an [Elector] does not lead now: it is not running, it is campaigning
// while another process leads, its term was lost, or its lease has run out by the local
// clock. [Elector.IsLeader] returns it; a scheduler that gets it skips the run.
var ErrNotLeader = errors.New("not leader")

// An Elector keeps this process a candidate for the leadership of a name (see the package
// documentation). It is safe for concurrent use: IsLeader and Token may be called from any
// goroutine, also while Run runs. Run runs once at a time on one Elector; to run several
// candidates in one process, make one Elector each.
type Elector struct {
	locker *fencing.Locker
	name   string
	opts   []fencing.CallOption

	running atomic.Bool
	term    atomic.Pointer[term] // the term running; nil between terms
}

// term is one term as the Elector sees it.
type term struct {
	token int64
	done  <-chan struct{}  // closed when the term ends (lost, or Run's context ended)
	until func() time.Time // the lease's local end; renewals move it on
}

// over returns nil while the term runs with its lease valid at now, or why it does not.
func (t *term) over(now time.Time) error {
	select {
	case <-t.done:
		return errTermLost
	default:
	}
	if !now.Before(t.until()) {
		return errLeaseOver
	}
	return nil
}

// New returns an Elector for the leadership of name on locker; every replica must use the
// same name and the same Redis (and prefix) for its Locker. opts apply to every campaign and
// term, as they do to [fencing.Locker.Lead]: [fencing.WithTTL] sets the lease, which bounds
// how long a dead leader's successor waits. It does not talk to Redis and never fails: a nil
// locker or an empty name is reported by [Elector.Run], as an error wrapping
// [fencing.ErrInvalid], and by [Elector.IsLeader], as an error matching both [ErrNotLeader]
// and ErrInvalid; an oversized name or an invalid option is reported by Run.
func New(locker *fencing.Locker, name string, opts ...fencing.CallOption) *Elector {
	return &Elector{locker: locker, name: name, opts: slices.Clip(slices.Clone(opts))}
}

// Run campaigns for the leadership of the Elector's name and leads until ctx ends: when a
// term is lost, it campaigns again; call it in every replica. It is [fencing.Locker.Lead]
// with a term that lasts until leadership is lost or ctx ends, and it returns as Lead does:
// with ctx.Err() once ctx ends (a term in progress is ended first and leadership released,
// so the next candidate leads at once), or at once with an error wrapping
// [fencing.ErrInvalid] (a nil Locker, a nil ctx, an empty or oversized name, an invalid
// option) or [fencing.ErrClosed]. Redis errors while campaigning are retried, as Lead does.
//
// Run may be called again after it returned. While Run runs, another call of Run on the same
// Elector returns an error wrapping ErrInvalid at once and leaves the running one alone. No
// goroutine started by Run outlives it.
func (e *Elector) Run(ctx context.Context) error {
	if err := e.invalid(); err != nil {
		return e.errorf("%w", err)
	}
	if ctx == nil {
		return e.errorf("%w: nil context", fencing.ErrInvalid)
	}
	if !e.running.CompareAndSwap(false, true) {
		return e.errorf("%w: Run is already running on this Elector", fencing.ErrInvalid)
	}
	defer e.running.Store(false)
	return e.locker.Lead(ctx, e.name, e.lead, e.opts...)
}

// lead is one term: it publishes the term until the term's context ends.
func (e *Elector) lead(ctx context.Context) error {
	token, _ := fencing.TokenFromContext(ctx)
	t := &term{token: token, done: ctx.Done(), until: func() time.Time {
		until, _ := fencing.ValidUntilFromContext(ctx)
		return until
	}}
	e.term.Store(t)
	defer e.term.CompareAndSwap(t, nil)
	<-ctx.Done()
	return context.Cause(ctx)
}

// IsLeader returns nil while this process leads the Elector's name: a term of [Elector.Run]
// is running, and its lease has not run out by this host's monotonic clock
// ([fencing.ValidUntilFromContext]). The clock is checked on every call, so a process that was
// paused (SIGSTOP, a long GC pause) past its lease reports that it does not lead as soon as it
// runs again, before its renewal notices the loss. Otherwise it returns an error matching
// [ErrNotLeader]: Run is not running, it is campaigning while another process leads, the
// term was lost, or the lease has run out. When ctx is done, the error also matches
// ctx.Err(); with a nil locker or an empty name given to [New], it also matches
// [fencing.ErrInvalid]. It sends nothing to Redis and changes nothing.
//
// gocron v2 (WithDistributedElector) calls IsLeader with the job's context before each run;
// on an error it skips that run (counted as skipped, not as failed, and reported to no error
// listener) and schedules the next one as usual.
func (e *Elector) IsLeader(ctx context.Context) error {
	if err := e.invalid(); err != nil {
		return e.errorf("%w: %w", ErrNotLeader, err)
	}
	if ctx != nil && ctx.Err() != nil {
		return e.errorf("%w: %w", ErrNotLeader, ctx.Err())
	}
	t := e.term.Load()
	switch {
	case t != nil:
		if why := t.over(time.Now()); why != nil {
			return e.errorf("%w: %w", ErrNotLeader, why)
		}
		return nil
	case !e.running.Load():
		return e.errorf("%w: %w", ErrNotLeader, errNotRunning)
	}
	return e.errorf("%w: %w", ErrNotLeader, errCampaigning)
}

// Reasons for ErrNotLeader, after it in the error's text; unexported, not to be matched.
var (
	errTermLost    = errors.New("the term is over: leadership lost, or Run's context ended")
	errLeaseOver   = errors.New("the lease ran out by the local clock")
	errNotRunning  = errors.New("not running: Run was not called, or has returned")
	errCampaigning = errors.New("campaigning: another process leads, or the campaign has not won yet")
)

// Token returns the fencing token of the term this process leads, its epoch, and true; or
// false when [Elector.IsLeader] would return an error (ctx aside). Epochs of successive terms
// strictly increase across every process that uses the same name, so a store that refuses
// tokens below the highest it has seen refuses the writes of a leader that has been replaced
// without knowing it. A job reads it once, after the scheduler's IsLeader, and gives it to
// every write; when it returns false, leadership ended in between and the job should not
// write.
func (e *Elector) Token() (int64, bool) {
	if e == nil {
		return 0, false
	}
	t := e.term.Load()
	if t == nil || t.over(time.Now()) != nil {
		return 0, false
	}
	return t.token, true
}

// invalid returns what New was given that can never work, or nil.
func (e *Elector) invalid() error {
	switch {
	case e == nil:
		return fmt.Errorf("%w: nil Elector", fencing.ErrInvalid)
	case e.locker == nil:
		return fmt.Errorf("%w: nil Locker", fencing.ErrInvalid)
	case e.name == "":
		return fmt.Errorf("%w: empty name", fencing.ErrInvalid)
	}
	return nil
}

// errorf returns the error of the Elector: `leader: elector "<name>": ` and the cause.
func (e *Elector) errorf(format string, args ...any) error {
	name := ""
	if e != nil {
		name = e.name
	}
	return fmt.Errorf("leader: elector %q: "+format, append([]any{name}, args...)...)
}
