// Package cronfence runs the jobs of a robfig/cron v3 scheduler (github.com/robfig/cron/v3)
// in every replica of a service, and lets only the leader run them: each replica gives its
// Cron a [leader.Elector] of the same name, a job runs only while that elector leads, and the
// job writes with the term's fencing token, its epoch, which the store checks.
//
// [Schedule] adds a job to a Cron in one call: a function that takes a context, which
// carries the term's token ([fencing.TokenFromContext]) and the instant the run was
// scheduled for ([TickFromContext]). Each replica wires its elector and its Cron in three
// lines:
//
//	elector := leader.New(locker, "nightly-settlement")
//	go elector.Run(ctx) // in every replica: campaigns and leads until ctx ends
//	_, err := cronfence.Schedule(c, "0 2 * * *", elector, settle)
//
//	func settle(ctx context.Context) {
//		epoch, _ := fencing.TokenFromContext(ctx)
//		tick, _ := cronfence.TickFromContext(ctx) // 02:00 of the run's day, in every replica
//		// settle the day before tick, writing with epoch: the store refuses an epoch below
//		// the highest it has seen
//	}
//
// robfig/cron does not tell a job its tick; Schedule reads it from the Cron (the entry's
// Prev as the run begins), so it is the schedule's instant, not the clock's reading.
// [Func] makes the same job for c.AddJob or c.Schedule, with the token and without the tick.
//
// [SkipIfNotLeader] is a cron.JobWrapper, like cron.SkipIfStillRunning, for jobs that keep
// their shape (a func() or a cron.Job), for every job of a Cron or for one; the job reads the
// token with elector.Token():
//
//	c := cron.New(cron.WithChain(cronfence.SkipIfNotLeader(elector)))
//	c.AddFunc("@hourly", func() {
//		epoch, ok := elector.Token()
//		if !ok {
//			return // leadership ended since the wrapper asked
//		}
//		// write with epoch
//	})
//
// # Before each run
//
// [Schedule], [Func] and [SkipIfNotLeader] ask [leader.Elector.IsLeader] before every run, as
// gocron v2 does with the same Elector (gocron.WithDistributedElector). IsLeader answers from
// memory, without a round trip: the elector leads only while a term of its Run is going and
// the term's lease has not run out by this host's clock. A run on a replica that does not lead is skipped, and skipped
// runs are never made up. When Redis cannot be reached, the leader's renewals fail; it goes on
// running jobs until its lease runs out by its own clock (measured from before the lease
// began, less 1% for drift), then skips them. No other replica leads before that lease has
// run out in Redis, and the ticks in between are run by no one. IsLeader never returns a
// Redis error: every reason to skip matches [leader.ErrNotLeader]. [WithSkipHandler] sees
// each skipped run with its reason, to count them, or to raise an alert on the runs that can
// never happen: [fencing.ErrInvalid] (a nil Elector, or one made with a nil Locker or an empty
// name), or an Elector whose Run was never called (the error says "not running"). The package
// does not log.
//
// # What it does not guarantee
//
// One leader at a time is not one run per tick. Every replica's Cron fires a tick by its own
// clock, so when leadership moves between two replicas' timers for the same tick (a leader
// that shuts down resigns, and the next candidate leads within a round trip), both may run
// it; and ticks that fall while no replica leads (a dead leader's lease running out, the
// [fencing.WithTTL] of its Locker or Elector) are not run by anyone. Fence the job's writes
// with the token, and make a run idempotent per tick where a second run matters. A leader
// paused past its lease (a stopped process, a long GC pause) can still act once it wakes,
// before it looks: only the token stops its writes.
//
// Every replica must schedule the same specs in the same location (cron.WithLocation). A
// spec on the clock ("0 2 * * *", or "*/10 * * * * *" with cron.WithSeconds) fires at the
// same instants in every replica. robfig/cron's "@every d" counts from the moment each Cron
// started (or added the entry, if it was running), so replicas fire at different instants
// (and [TickFromContext] differs from one to the next), and after a change of leader the job
// runs sooner or later than d after its last run.
//
// For Asynq, asynqfence.Scheduler does better on each point: a tick enqueued by two leaders
// lands once (its task ID is made of the tick), and a new leader enqueues the tick it missed.
//
// # Errors
//
// cronfence returns, and gives [WithSkipHandler], the errors of the Elector and of the core
// as they are (their text starts with their package's prefix, "leader: " or "fencing: ").
// The errors it makes itself start with "cronfence: ", once, and match the sentinels they
// stand for ([fencing.ErrInvalid], [leader.ErrNotLeader]) with errors.Is without repeating
// their text; no text carries two packages' prefixes. Match errors with errors.Is, not by
// their text.
package cronfence
