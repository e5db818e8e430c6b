package cronfence

import (
	"context"

	"github.com/robfig/cron/v3"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/leader"
)

// Func returns a cron.Job that calls fn only while elector leads, with a context that carries
// the term's fencing token, its epoch: [fencing.TokenFromContext] returns it, as it does
// inside [fencing.Locker.Do], so code that reads the token from the context (such as
// store/gormfence) fences its writes with it unchanged.
//
//	c.AddJob("0 2 * * *", cronfence.Func(elector, func(ctx context.Context) {
//		epoch, _ := fencing.TokenFromContext(ctx)
//		// write with epoch: the store refuses an epoch below the highest it has seen
//	}))
//
// Before every run it asks [leader.Elector.IsLeader], as [SkipIfNotLeader] does, and reads
// [leader.Elector.Token]; when the elector does not lead, or its term ended in between, the
// run is skipped (never made up) and the [WithSkipHandler] handler gets an error matching
// [leader.ErrNotLeader]. fn's context is the base context ([WithBaseContext];
// context.Background() by default) with the token added. It is not cancelled when the term
// ends: an Elector tells whether it leads, not when it stops. The token is what keeps the
// writes of a replaced leader out; a long job can also check elector.IsLeader(ctx) between
// steps and stop when it reports an error.
//
// A nil fn is never called: every run is skipped with an error wrapping [fencing.ErrInvalid].
// The job holds no state between runs and is safe for concurrent use if fn is.
func Func(elector *leader.Elector, fn func(ctx context.Context), opts ...Option) cron.Job {
	cfg := newConfig(opts)
	return cron.FuncJob(func() { cfg.run(elector, fn, nil) })
}

// run is one run of a job of Func or Schedule: it calls fn with the term's token added to
// the base context, and to what with adds to it, if not nil (Schedule's tick), or reports why
// it skips.
func (cfg *config) run(elector *leader.Elector, fn func(ctx context.Context), with func(ctx context.Context) (context.Context, error)) {
	if fn == nil {
		cfg.skip(invalid("nil function"))
		return
	}
	ctx, err := cfg.context()
	if err == nil && with != nil {
		ctx, err = with(ctx)
	}
	var token int64
	if err == nil {
		token, err = leading(ctx, elector)
	}
	if err != nil {
		cfg.skip(err)
		return
	}
	fn(fencing.ContextWithToken(ctx, token))
}

// leading returns the token of the term elector leads now, or why it does not lead.
func leading(ctx context.Context, elector *leader.Elector) (int64, error) {
	if err := elector.IsLeader(ctx); err != nil {
		return 0, err
	}
	if token, ok := elector.Token(); ok {
		return token, nil
	}
	// The term ended between the two calls: IsLeader now says why. If it leads again, a
	// new term began in between; this run is skipped all the same.
	if err := elector.IsLeader(ctx); err != nil {
		return 0, err
	}
	return 0, errTermChanged
}
