package cronfence_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/fencekit/fencekit/cronfence"
	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/internal/testkit/redistest"
	"github.com/fencekit/fencekit/leader"
)

// everySecond is the spec of the tick tests: on the clock, every second (cron.WithSeconds).
const everySecond = "* * * * * *"

// tickRun is one run of a job added by Schedule, as the job saw it.
type tickRun struct {
	replica int
	tick    time.Time // TickFromContext
	hasTick bool
	token   int64 // fencing.TokenFromContext
	began   time.Time
}

// TestScheduleTick runs three replicas, each with a Locker, an Elector of one name and a Cron
// of its own, whose job Schedule adds on a spec on the clock (every second, in UTC). Each run's
// context carries the tick it was scheduled for: an activation of the spec (a whole second,
// which time.Now() never is), not after the run began, after the Crons were started (so not a
// tick the Cron never ran), in the Cron's location, one tick per run of a replica, increasing;
// and the leader's epoch as the token. The leader then resigns, the next one leads, and its
// runs go on with the ticks after (or, when leadership moved between two replicas' timers
// for one tick, from that tick: one leader at a time is not one run per tick).
func TestScheduleTick(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	parser := cron.NewParser(cron.Second | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)
	spec, err := parser.Parse(everySecond)
	if err != nil {
		t.Fatal(err)
	}
	runs := make(chan tickRun, 64)
	type rep struct {
		elector *leader.Elector
		stop    func() error
	}
	var reps []rep
	started := time.Now()
	for n := range 3 {
		c := r.NewClient(t)
		e := leader.New(newLocker(t, r, c, fencing.WithTTL(10*time.Second)), "settlement")
		stop := campaign(t, e)
		cr := cron.New(cron.WithSeconds(), cron.WithLocation(time.UTC))
		// The wiring this test is about: one line per replica.
		if _, err := cronfence.Schedule(cr, everySecond, e, func(ctx context.Context) {
			run := tickRun{replica: n, began: time.Now()}
			run.tick, run.hasTick = cronfence.TickFromContext(ctx)
			run.token, _ = fencing.TokenFromContext(ctx)
			runs <- run
		}); err != nil {
			t.Fatal(err)
		}
		cr.Start()
		t.Cleanup(func() { <-cr.Stop().Done() })
		reps = append(reps, rep{e, stop})
	}
	leading := func(not int) (int, int64) {
		var who int
		var epoch int64
		waitFor(t, "a leader", func() bool {
			for i, rp := range reps {
				if e, ok := rp.elector.Token(); ok && i != not {
					who, epoch = i, e
					return true
				}
			}
			return false
		})
		return who, epoch
	}
	first, epoch := leading(-1)
	var got []tickRun
	take := func(n int) {
		t.Helper()
		timeout := time.NewTimer(waitLimit)
		defer timeout.Stop()
		for range n {
			select {
			case run := <-runs:
				got = append(got, run)
			case <-timeout.C:
				t.Fatalf("timed out after %v waiting for a run; got %d", waitLimit, len(got))
			}
		}
	}
	take(3)
	if err := reps[first].stop(); !errors.Is(err, context.Canceled) {
		t.Fatalf("replica %d's Run: got %v, want context.Canceled", first, err)
	}
	next, nextEpoch := leading(first)
	// Runs by the next leader (a run of the first leader's may still come in between).
	for len(got) == 0 || got[len(got)-1].replica != next || countBy(got, next) < 3 {
		take(1)
	}

	for i, run := range got {
		want := map[int]int64{first: epoch, next: nextEpoch}[run.replica]
		switch {
		case !run.hasTick:
			t.Fatalf("run %d: no tick in the context", i)
		case run.token != want:
			t.Errorf("run %d by replica %d: token %d, want its epoch %d", i, run.replica, run.token, want)
		case !spec.Next(run.tick.Add(-time.Nanosecond)).Equal(run.tick) || run.tick.Nanosecond() != 0:
			t.Errorf("run %d: tick %v is not an activation of %q", i, run.tick, everySecond)
		case run.tick.After(run.began):
			t.Errorf("run %d: tick %v after the run began, %v", i, run.tick, run.began)
		case !run.tick.After(started):
			t.Errorf("run %d: tick %v not after the Crons started, %v", i, run.tick, started)
		case run.tick.Location() != time.UTC:
			t.Errorf("run %d: tick %v in %v, want the Cron's location, UTC", i, run.tick, run.tick.Location())
		case i > 0 && run.replica == got[i-1].replica && !run.tick.After(got[i-1].tick):
			t.Errorf("run %d: tick %v after tick %v, want one run per tick, in order", i, run.tick, got[i-1].tick)
		case i > 0 && run.tick.Before(got[i-1].tick):
			t.Errorf("run %d by replica %d: tick %v before the previous leader's last, %v", i, run.replica, run.tick, got[i-1].tick)
		}
	}
	if t.Failed() {
		t.Logf("runs: %+v", got)
	}
	t.Logf("%d runs, ticks %s to %s; replica %d led with epoch %d, then replica %d with epoch %d",
		len(got), got[0].tick.Format(time.TimeOnly), got[len(got)-1].tick.Format(time.TimeOnly), first, epoch, next, nextEpoch)
}

// countBy returns how many of runs replica ran.
func countBy(runs []tickRun, replica int) int {
	n := 0
	for _, r := range runs {
		if r.replica == replica {
			n++
		}
	}
	return n
}

// TestScheduleInvalid checks Schedule's refusals: each adds nothing, and returns an error
// matching fencing.ErrInvalid whose text is cronfence's own, once.
func TestScheduleInvalid(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	e := leader.New(newLocker(t, r, r.Client), "settlement")
	fn := func(context.Context) {}
	for _, tc := range []struct {
		name    string
		c       *cron.Cron
		spec    string
		elector *leader.Elector
		fn      func(context.Context)
		says    string
	}{
		{"nil Cron", nil, "@hourly", e, fn, "cronfence: nil Cron"},
		{"nil elector", cron.New(), "@hourly", nil, fn, "cronfence: nil Elector"},
		{"nil function", cron.New(), "@hourly", e, nil, "cronfence: nil function"},
		{"bad spec", cron.New(), "every hour", e, fn, `cronfence: spec "every hour": `},
		{"seconds without WithSeconds", cron.New(), everySecond, e, fn, `cronfence: spec "* * * * * *": `},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id, err := cronfence.Schedule(tc.c, tc.spec, tc.elector, tc.fn)
			if !errors.Is(err, fencing.ErrInvalid) || id != 0 {
				t.Fatalf("got %d, %v; want 0 and an error matching ErrInvalid", id, err)
			}
			if msg := err.Error(); !strings.HasPrefix(msg, tc.says) || strings.Count(msg, "cronfence: ") != 1 ||
				strings.Contains(msg, "fencing: ") || strings.Contains(msg, "\n") {
				t.Errorf("got text %q, want it to start with %q and carry no other package's prefix", msg, tc.says)
			}
			if tc.c != nil && len(tc.c.Entries()) != 0 {
				t.Errorf("got %d entries, want none added", len(tc.c.Entries()))
			}
		})
	}
}

// TestScheduleNoTick checks that a run without a tick is skipped, not run with a made-up one:
// the entry's job run by hand before its first tick, and after the entry was removed.
func TestScheduleNoTick(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	e := leader.New(newLocker(t, r, r.Client), "settlement")
	campaign(t, e)
	waitLeading(t, e)
	var sk skips
	var mu sync.Mutex
	ran := 0
	c := cron.New() // not started
	id, err := cronfence.Schedule(c, "@hourly", e, func(context.Context) { mu.Lock(); ran++; mu.Unlock() },
		cronfence.WithSkipHandler(sk.add))
	if err != nil {
		t.Fatal(err)
	}
	job := c.Entry(id).WrappedJob
	job.Run()
	c.Remove(id)
	job.Run()
	errs := sk.take()
	mu.Lock()
	defer mu.Unlock()
	if ran != 0 || len(errs) != 2 {
		t.Fatalf("got %d runs and skips %v, want 0 runs and 2 skips", ran, errs)
	}
	for _, err := range errs {
		if errors.Is(err, leader.ErrNotLeader) || errors.Is(err, fencing.ErrInvalid) || !strings.HasPrefix(err.Error(), "cronfence: entry ") {
			t.Errorf("got %v, want cronfence's own error saying the entry has no scheduled run", err)
		}
	}
}

// TestFuncNoTick checks that Func's context carries no tick: robfig/cron does not give one.
func TestFuncNoTick(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	e := leader.New(newLocker(t, r, r.Client), "settlement")
	campaign(t, e)
	waitLeading(t, e)
	has := make(chan bool, 1)
	cronfence.Func(e, func(ctx context.Context) { _, ok := cronfence.TickFromContext(ctx); has <- ok }).Run()
	if <-has {
		t.Error("TickFromContext in Func's context: got true, want false")
	}
}
