package cronfence

import (
	"context"
	"fmt"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/leader"
)

// Schedule adds to c a job that calls fn on spec, only while elector leads, as [Func] does,
// and gives fn's context the instant the run was scheduled for ([TickFromContext]) beside
// the term's fencing token ([fencing.TokenFromContext]). Each replica wires its Cron in
// three lines:
//
//	elector := leader.New(locker, "nightly-settlement")
//	go elector.Run(ctx) // campaigns and leads until ctx ends
//	_, err := cronfence.Schedule(c, "0 2 * * *", elector, settle) // settle(ctx): its tick and epoch
//
// The tick is the one robfig/cron ran the entry for, as c reports it (its Entry's Prev,
// read as the run begins): the schedule's activation, never the clock's reading, so a
// spec on the clock ("0 2 * * *", or "*/10 * * * * *" with cron.WithSeconds) gives the same
// tick in every replica, in c's location (cron.WithLocation, or the spec's CRON_TZ). A job
// that works on "the day before its tick" reads it rather than time.Now(), so a run that
// starts late, or on another replica, works on the same day.
//
// spec is parsed by c, as c.AddJob parses it (so cron.WithSeconds and cron.WithParser
// apply), and c's chain (cron.WithChain) wraps the job. Schedule returns the entry's ID,
// or, adding nothing, an error wrapping [fencing.ErrInvalid]: c's error for a spec it cannot
// parse, or a nil c, elector or fn. opts are Func's: [WithSkipHandler] also sees the runs
// that have no tick, which are skipped: a run of an entry removed (c.Remove) after the run
// was started, or the entry's job run by hand (c.Entry(id).Job.Run()) before its first tick.
//
// A run reads its tick when it begins: one that begins a whole period late (behind
// cron.DelayIfStillRunning in c's chain, say, or on a machine stalled that long) reads the
// later tick that the Cron has run the entry for since.
func Schedule(c *cron.Cron, spec string, elector *leader.Elector, fn func(ctx context.Context), opts ...Option) (cron.EntryID, error) {
	switch {
	case c == nil:
		return 0, invalid("nil Cron")
	case elector == nil:
		return 0, invalid("nil Elector")
	case fn == nil:
		return 0, invalid("nil function")
	}
	cfg := newConfig(opts)
	var id cron.EntryID
	added := make(chan struct{}) // closed once id is set: a run may begin before AddJob returns
	tick := func(ctx context.Context) (context.Context, error) {
		<-added
		e := c.Entry(id)
		if !e.Valid() || e.Prev.IsZero() {
			return nil, &ownError{msg: fmt.Sprintf("entry %d has no scheduled run: removed from the Cron, or its job run by hand", id)}
		}
		return context.WithValue(ctx, tickKey{}, e.Prev), nil
	}
	id, err := c.AddJob(spec, cron.FuncJob(func() { cfg.run(elector, fn, tick) }))
	if err != nil {
		close(added) // no run can begin: nothing was added
		return 0, &ownError{msg: fmt.Sprintf("spec %q", spec), cause: err, is: []error{fencing.ErrInvalid}}
	}
	close(added)
	return id, nil
}

// tickKey is the context key of a run's tick.
type tickKey struct{}

// TickFromContext returns the instant a run of a job added by [Schedule] was scheduled for,
// given the context of its function. The second result is false for any other context
// (that of [Func], say).
func TickFromContext(ctx context.Context) (time.Time, bool) {
	tick, ok := ctx.Value(tickKey{}).(time.Time)
	return tick, ok
}
