package cronfence

import (
	"github.com/robfig/cron/v3"

	"github.com/fencekit/fencekit/leader"
)

// SkipIfNotLeader returns a cron.JobWrapper that skips the runs of a job while elector does
// not lead, as cron.SkipIfStillRunning skips them while the previous run goes on: before
// every run it asks [leader.Elector.IsLeader], with the context of [WithBaseContext], and
// when the elector does not lead it skips that run (the next ones come as scheduled; a
// skipped run is never made up) and calls the [WithSkipHandler] handler with IsLeader's
// error, which matches [leader.ErrNotLeader]. Give it to the Cron of every replica, each with an Elector
// of the same name that [leader.Elector.Run] keeps campaigning:
//
//	c := cron.New(cron.WithChain(cron.Recover(logger), cronfence.SkipIfNotLeader(elector)))
//
// or to one job, with cron.NewChain(cronfence.SkipIfNotLeader(elector)).Then(job).
//
// The job reads the term's fencing token with elector.Token(), and gives it to every write;
// when Token reports false, leadership ended after the wrapper asked, and the job should
// not write. [Func] puts the token in a context instead.
//
// A nil job (NewChain(...).Then(nil)) is never run: every run is skipped with an error
// wrapping [fencing.ErrInvalid]. The wrapper holds no state between runs; the job it returns
// is safe for concurrent use if job is (robfig/cron starts a run while the previous one still
// runs, unless a wrapper such as cron.SkipIfStillRunning prevents it).
func SkipIfNotLeader(elector *leader.Elector, opts ...Option) cron.JobWrapper {
	cfg := newConfig(opts)
	return func(job cron.Job) cron.Job {
		return cron.FuncJob(func() {
			if job == nil {
				cfg.skip(invalid("nil job"))
				return
			}
			ctx, err := cfg.context()
			if err == nil {
				err = elector.IsLeader(ctx)
			}
			if err != nil {
				cfg.skip(err)
				return
			}
			job.Run()
		})
	}
}
