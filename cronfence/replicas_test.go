package cronfence_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/robfig/cron/v3"

	"github.com/fencekit/fencekit/cronfence"
	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/internal/testkit/redistest"
	"github.com/fencekit/fencekit/leader"
)

// steps is a cron.Schedule that the test drives, so that the replicas' Crons fire the same
// ticks, one at a time, without waiting for the clock: Next waits for the test's next tick
// and returns it (a time already past, so that the Cron starts the run at once), or the zero
// time (never again) once stopped. A run learns its tick from current: a Cron asks Next for
// the tick after only once it has started the run, and the test hands a replica its next
// tick only once that replica has reported the run of the previous one, so current is the
// tick the run was started for.
type steps struct {
	ticks chan time.Time
	stop  chan struct{}
	once  sync.Once
	last  atomic.Int64 // the tick handed out last, in Unix nanoseconds
}

func newSteps() *steps {
	return &steps{ticks: make(chan time.Time, 1), stop: make(chan struct{})}
}

func (s *steps) Next(time.Time) time.Time {
	select {
	case tick := <-s.ticks:
		s.last.Store(tick.UnixNano())
		return tick
	case <-s.stop:
		return time.Time{}
	}
}

// current returns the tick handed out last.
func (s *steps) current() time.Time { return time.Unix(0, s.last.Load()).UTC() }

// end makes Next return the zero time from now on, so that the Cron's loop can stop.
func (s *steps) end() { s.once.Do(func() { close(s.stop) }) }

// tickAt returns the k-th tick: any time in the past does, as long as each is distinct.
func tickAt(k int) time.Time {
	return time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(k) * time.Minute)
}

// report is what one replica's Cron did for one tick.
type report struct {
	replica int
	tick    time.Time
	ran     bool
	token   int64 // the run's token: from its context (Func), from Token() (SkipIfNotLeader)
	epoch   int64 // the Elector's Token() as the job ran; -1 when it reported false
	err     error // why the run was skipped
}

func (rep report) String() string {
	if rep.ran {
		return fmt.Sprintf("replica %d ran tick %s with token %d (epoch %d)",
			rep.replica, rep.tick.Format(time.TimeOnly), rep.token, rep.epoch)
	}
	return fmt.Sprintf("replica %d skipped tick %s: %v", rep.replica, rep.tick.Format(time.TimeOnly), rep.err)
}

// A replica is what one process of a service runs: a client, a Locker, an Elector and a Cron
// whose one job reports every run and every skipped run.
type replica struct {
	n       int
	client  *redis.Client
	elector *leader.Elector
	sched   *steps
	cron    *cron.Cron
	stopRun func() error // ends the elector's Run and returns its error
}

// group is the replicas of one test, on one Redis.
type group struct {
	t        *testing.T
	r        *redistest.Redis
	style    string // "Func" or "SkipIfNotLeader": how the job is made
	ttl      time.Duration
	replicas []*replica
	reports  chan report
}

func newGroup(t *testing.T, style string, n int, ttl time.Duration) *group {
	g := &group{t: t, r: redistest.New(t), style: style, ttl: ttl, reports: make(chan report, 1024)}
	for i := range n {
		g.replicas = append(g.replicas, g.start(i))
	}
	return g
}

// start starts replica n, with a client and a Locker of its own.
func (g *group) start(n int) *replica {
	t := g.t
	rp := &replica{n: n, client: g.r.NewClient(t), sched: newSteps()}
	rp.elector = leader.New(newLocker(t, g.r, rp.client, fencing.WithTTL(g.ttl)), "settlement")
	rp.stopRun = campaign(t, rp.elector)
	skipped := cronfence.WithSkipHandler(func(err error) {
		g.reports <- report{replica: n, tick: rp.sched.current(), err: err}
	})
	ran := func(token int64) {
		epoch, ok := rp.elector.Token()
		if !ok {
			epoch = -1
		}
		g.reports <- report{replica: n, tick: rp.sched.current(), ran: true, token: token, epoch: epoch}
	}
	switch g.style {
	case "Func":
		rp.cron = cron.New()
		rp.cron.Schedule(rp.sched, cronfence.Func(rp.elector, func(ctx context.Context) {
			token, ok := fencing.TokenFromContext(ctx)
			if !ok {
				token = -1
			}
			ran(token)
		}, skipped))
	case "SkipIfNotLeader":
		rp.cron = cron.New(cron.WithChain(cronfence.SkipIfNotLeader(rp.elector, skipped)))
		rp.cron.Schedule(rp.sched, cron.FuncJob(func() {
			token, ok := rp.elector.Token()
			if !ok {
				token = -1
			}
			ran(token)
		}))
	default:
		t.Fatalf("no style %q", g.style)
	}
	rp.cron.Start()
	t.Cleanup(func() {
		rp.sched.end()
		select {
		case <-rp.cron.Stop().Done(): // the Cron's loop has ended, and its runs
		case <-time.After(waitLimit):
			t.Errorf("replica %d: the Cron's runs did not end", n)
		}
		_ = rp.stopRun()
	})
	return rp
}

// leader waits until a replica other than not leads, and returns it with its epoch.
func (g *group) leader(not *replica) (*replica, int64) {
	g.t.Helper()
	var lead *replica
	var epoch int64
	waitFor(g.t, "a leader", func() bool {
		for _, rp := range g.replicas {
			if e, ok := rp.elector.Token(); ok && rp != not {
				lead, epoch = rp, e
				return true
			}
		}
		return false
	})
	return lead, epoch
}

// tick hands tick to every replica's Cron and returns the report of each, by replica: one
// run or one skip each.
func (g *group) tick(tick time.Time) []report {
	g.t.Helper()
	for _, rp := range g.replicas {
		rp.sched.ticks <- tick
	}
	reps := make([]report, len(g.replicas))
	timeout := time.NewTimer(waitLimit)
	defer timeout.Stop()
	for got := 0; got < len(reps); got++ {
		select {
		case rep := <-g.reports:
			if !rep.tick.Equal(tick) || !reps[rep.replica].tick.IsZero() {
				g.t.Fatalf("tick %s: unexpected report: %v", tick.Format(time.TimeOnly), rep)
			}
			reps[rep.replica] = rep
		case <-timeout.C:
			g.t.Fatalf("tick %s: timed out after %v with %d of %d reports: %v",
				tick.Format(time.TimeOnly), waitLimit, got, len(reps), reps)
		}
	}
	return reps
}

// ranOnce checks that lead, and no other replica, ran the tick of reps, with epoch as its
// token and its Elector's epoch, and that the others skipped it as not leaders.
func (g *group) ranOnce(reps []report, lead *replica, epoch int64) {
	g.t.Helper()
	for _, rep := range reps {
		switch {
		case rep.replica == lead.n && (!rep.ran || rep.token != epoch || rep.epoch != epoch):
			g.t.Errorf("%v; want it run by the leader, replica %d, with token %d", rep, lead.n, epoch)
		case rep.replica != lead.n && rep.ran:
			g.t.Errorf("%v; want it run by the leader alone, replica %d (epoch %d)", rep, lead.n, epoch)
		case rep.replica != lead.n && !errors.Is(rep.err, leader.ErrNotLeader):
			g.t.Errorf("%v; want it skipped with an error matching ErrNotLeader", rep)
		}
	}
}

// noneLeft checks that no report came after those the test collected.
func (g *group) noneLeft() {
	g.t.Helper()
	for _, rp := range g.replicas {
		rp.sched.end()
		<-rp.cron.Stop().Done()
	}
	close(g.reports)
	for rep := range g.reports {
		g.t.Errorf("unexpected report after the last tick: %v", rep)
	}
}

// TestReplicasRunEachTickOnce runs three replicas, each with a client, a Locker, an Elector and
// a robfig/cron Cron of its own, on one Redis, for 30 ticks that every Cron fires; the
// leader resigns (its Run's context ends, and it campaigns again at once) before every sixth
// tick. Each tick is run by exactly one replica, the one that leads, with its epoch as the
// token; the other two skip it as not leaders; epochs strictly increase from term to term;
// no tick is run twice or missed. Once with jobs made by Func, once with SkipIfNotLeader.
func TestReplicasRunEachTickOnce(t *testing.T) {
	t.Parallel()
	for _, style := range []string{"Func", "SkipIfNotLeader"} {
		t.Run(style, func(t *testing.T) {
			// Terms end by resignation here; a long lease keeps a slow renewal on a loaded
			// machine from ending one too.
			g := newGroup(t, style, 3, 10*time.Second)
			const ticks, every = 30, 6
			lead, epoch := g.leader(nil)
			epochs := []int64{epoch}
			runs := make(map[int]int) // by replica
			for k := 1; k <= ticks; k++ {
				if k%every == 0 {
					if err := lead.stopRun(); !errors.Is(err, context.Canceled) {
						t.Fatalf("replica %d's Run: got %v, want context.Canceled", lead.n, err)
					}
					old := lead
					lead, epoch = g.leader(old)
					old.stopRun = campaign(t, old.elector) // a candidate again, behind the others
					if epoch <= epochs[len(epochs)-1] {
						t.Fatalf("replica %d leads with epoch %d after epochs %v, want it higher", lead.n, epoch, epochs)
					}
					epochs = append(epochs, epoch)
				}
				reps := g.tick(tickAt(k))
				g.ranOnce(reps, lead, epoch)
				for _, rep := range reps {
					if rep.ran {
						runs[rep.replica]++
					}
				}
				if t.Failed() {
					t.FailNow()
				}
			}
			g.noneLeft()
			total := 0
			for _, n := range runs {
				total += n
			}
			if total != ticks {
				t.Errorf("got %d runs for %d ticks, want one each", total, ticks)
			}
			t.Logf("%d ticks, each run once: by replica %v, in terms of epochs %v", ticks, runs, epochs)
		})
	}
}

// TestLostLeadershipStopsRuns takes leadership away from a replica that runs a job, and
// checks that it skips the job from then on, with an error matching ErrNotLeader, and runs
// it again when it leads again, with a higher token:
//   - taken over: another owner, queued, takes the name when the lock disappears (as if the
//     lease had run out while the leader was paused);
//   - redis down (miniredis): every command fails, the leader's lease runs out by its own
//     clock, and it leads again once Redis answers.
func TestLostLeadershipStopsRuns(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"taken over", "redis down"} {
		t.Run(how, func(t *testing.T) {
			const ttl = 3 * time.Second
			g := newGroup(t, "Func", 1, ttl)
			r := g.r
			if how == "redis down" && r.Mini == nil {
				t.Skip("needs miniredis's SetError")
			}
			rp, first := g.leader(nil)
			g.ranOnce(g.tick(tickAt(1)), rp, first)
			var intruder int64
			switch how {
			case "taken over":
				other := newLocker(t, r, r.Client, fencing.WithTTL(ttl))
				got := make(chan error, 1)
				var lock *fencing.Lock
				go func() {
					var err error
					lock, err = other.Acquire(t.Context(), "settlement")
					got <- err
				}()
				// Queued first, so that the replica, campaigning again once it sees the loss,
				// cannot take the name back before it.
				waitFor(t, "the intruder in the queue", func() bool {
					return r.Client.LLen(t.Context(), r.Prefix+"{settlement}:queue").Val() == 1
				})
				if err := r.Client.Del(t.Context(), r.Prefix+"{settlement}:lock").Err(); err != nil {
					t.Fatal(err)
				}
				select {
				case err := <-got:
					if err != nil {
						t.Fatalf("intruder: %v", err)
					}
				case <-time.After(waitLimit):
					t.Fatal("the intruder did not get the lock")
				}
				intruder = lock.Token()
				defer lock.Release(context.Background())
				waitFor(t, "the replica to see the loss", notLeading(t, rp))
				g.skipped(g.tick(tickAt(2)))
				g.skipped(g.tick(tickAt(3)))
				if err := lock.Release(t.Context()); err != nil {
					t.Fatal(err)
				}
			case "redis down":
				r.Mini.SetError("LOADING Redis is loading the dataset in memory")
				waitFor(t, "the lease to run out by the replica's clock", notLeading(t, rp))
				g.skipped(g.tick(tickAt(2)))
				r.Mini.SetError("")
				r.Mini.FastForward(ttl) // the lease has run out meanwhile
			}
			_, second := g.leader(nil)
			if second <= first || second <= intruder {
				t.Fatalf("got epoch %d after %d (and the intruder's %d), want it higher", second, first, intruder)
			}
			g.ranOnce(g.tick(tickAt(4)), rp, second)
			g.noneLeft()
		})
	}
}

// notLeading returns a condition that holds when rp's Elector does not lead.
func notLeading(t *testing.T, rp *replica) func() bool {
	return func() bool { return rp.elector.IsLeader(t.Context()) != nil }
}

// skipped checks that every replica skipped the tick of reps as not leader.
func (g *group) skipped(reps []report) {
	g.t.Helper()
	for _, rep := range reps {
		if rep.ran || !errors.Is(rep.err, leader.ErrNotLeader) {
			g.t.Errorf("%v; want it skipped with an error matching ErrNotLeader", rep)
		}
	}
}

// TestKilledLeaderIsReplaced cuts the leader of three replicas off from Redis (its client
// closed, as a process that died or was partitioned away; its Cron keeps firing): it skips
// the ticks once its lease has run out by its own clock, another replica leads with a higher
// epoch once the lease has run out in Redis, and runs every tick from then on, alone.
func TestKilledLeaderIsReplaced(t *testing.T) {
	t.Parallel()
	const ttl = 3 * time.Second
	g := newGroup(t, "Func", 3, ttl)
	dead, first := g.leader(nil)
	g.ranOnce(g.tick(tickAt(1)), dead, first)
	if err := dead.client.Close(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	// Until its lease runs out, the cut-off leader still leads, and no one else can.
	for _, rep := range g.tick(tickAt(2)) {
		if rep.ran && (rep.replica != dead.n || rep.token != first) {
			t.Errorf("%v; want no run, or one by the cut-off leader, replica %d, with epoch %d", rep, dead.n, first)
		}
	}
	waitFor(t, "the cut-off leader's lease to run out by its clock", notLeading(t, dead))
	if g.r.Mini != nil {
		g.r.Mini.FastForward(ttl) // on miniredis, the lease runs out only so
	}
	next, second := g.leader(dead)
	t.Logf("replica %d was cut off; replica %d leads with epoch %d, %v later (lease %v)",
		dead.n, next.n, second, time.Since(killed).Round(time.Millisecond), ttl)
	if second <= first {
		t.Fatalf("replica %d leads with epoch %d after %d, want it higher", next.n, second, first)
	}
	for k := 3; k <= 6; k++ {
		g.ranOnce(g.tick(tickAt(k)), next, second)
	}
	if _, ok := dead.elector.Token(); ok {
		t.Error("the cut-off replica reports a token")
	}
	g.noneLeft()
}
