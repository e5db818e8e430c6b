package cronfence_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/robfig/cron/v3"

	"github.com/fencekit/fencekit/cronfence"
	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/internal/testkit/redistest"
	"github.com/fencekit/fencekit/leader"
)

// cancelled returns a context that is already cancelled.
func cancelled() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

// skipCase is one run of a job made by SkipIfNotLeader or Func, and what it must do.
type skipCase struct {
	name     string
	elector  *leader.Elector
	nilJob   bool // no job (SkipIfNotLeader) or no function (Func)
	opts     []cronfence.Option
	runs     bool     // the job runs; otherwise the run is skipped with an error that:
	matches  []error  // matches each of these,
	excludes []error  // matches none of these,
	says     []string // and whose text holds each of these
}

// skipCases returns the cases both SkipIfNotLeader and Func must pass, on one Elector that
// leads and one whose Run was never called.
func skipCases(t *testing.T) []skipCase {
	r := redistest.New(t)
	l := newLocker(t, r, r.Client)
	lead := leader.New(l, "leader")
	campaign(t, lead)
	waitLeading(t, lead)
	idle := leader.New(l, "idle")
	return []skipCase{
		{name: "leads", elector: lead, runs: true},
		{name: "not running", elector: idle,
			matches: []error{leader.ErrNotLeader}, excludes: []error{fencing.ErrInvalid}, says: []string{`"idle"`, "not running"}},
		{name: "nil elector",
			matches: []error{leader.ErrNotLeader, fencing.ErrInvalid}, says: []string{"nil Elector"}},
		{name: "nil locker", elector: leader.New(nil, "leader"),
			matches: []error{leader.ErrNotLeader, fencing.ErrInvalid}, says: []string{"nil Locker"}},
		{name: "empty name", elector: leader.New(l, ""),
			matches: []error{leader.ErrNotLeader, fencing.ErrInvalid}, says: []string{"empty name"}},
		{name: "nil job", elector: lead, nilJob: true,
			matches: []error{fencing.ErrInvalid}, excludes: []error{leader.ErrNotLeader}, says: []string{"cronfence: nil "}},
		{name: "base context done", elector: lead, opts: []cronfence.Option{cronfence.WithBaseContext(cancelled)},
			matches: []error{leader.ErrNotLeader, context.Canceled}},
		{name: "nil base context", elector: lead, opts: []cronfence.Option{cronfence.WithBaseContext(func() context.Context { return nil })},
			matches: []error{fencing.ErrInvalid}, excludes: []error{leader.ErrNotLeader}, says: []string{"base context"}},
		{name: "nil base function", elector: lead, opts: []cronfence.Option{cronfence.WithBaseContext(nil), nil}, runs: true},
	}
}

// check runs job once and checks what happened against tc.
func (tc skipCase) check(t *testing.T, job cron.Job, ran *atomic.Int32, sk *skips) {
	t.Helper()
	job.Run()
	errs := sk.take()
	switch {
	case tc.runs && (ran.Load() != 1 || len(errs) != 0):
		t.Fatalf("got %d runs and skips %v, want 1 run and no skip", ran.Load(), errs)
	case tc.runs:
		return
	case ran.Load() != 0 || len(errs) != 1:
		t.Fatalf("got %d runs and skips %v, want no run and 1 skip", ran.Load(), errs)
	}
	for _, want := range tc.matches {
		if !errors.Is(errs[0], want) {
			t.Errorf("skipped with %q, want an error matching %v", errs[0], want)
		}
	}
	for _, not := range tc.excludes {
		if errors.Is(errs[0], not) {
			t.Errorf("skipped with %q, want an error that does not match %v", errs[0], not)
		}
	}
	for _, s := range tc.says {
		if !strings.Contains(errs[0].Error(), s) {
			t.Errorf("skipped with %q, want an error that says %q", errs[0], s)
		}
	}
}

// TestSkipIfNotLeader runs a job wrapped by SkipIfNotLeader once per case: it runs while its
// Elector leads, and is skipped otherwise, with the reason given to the skip handler.
func TestSkipIfNotLeader(t *testing.T) {
	t.Parallel()
	for _, tc := range skipCases(t) {
		t.Run(tc.name, func(t *testing.T) {
			var ran atomic.Int32
			var job cron.Job = cron.FuncJob(func() { ran.Add(1) })
			if tc.nilJob {
				job = nil
			}
			var sk skips
			opts := append([]cronfence.Option{cronfence.WithSkipHandler(sk.add)}, tc.opts...)
			tc.check(t, cron.NewChain(cronfence.SkipIfNotLeader(tc.elector, opts...)).Then(job), &ran, &sk)
			// Without a skip handler: the same, silently.
			ran.Store(0)
			cron.NewChain(cronfence.SkipIfNotLeader(tc.elector, tc.opts...)).Then(job).Run()
			if want := map[bool]int32{false: 0, true: 1}[tc.runs]; ran.Load() != want {
				t.Fatalf("without a skip handler: got %d runs, want %d", ran.Load(), want)
			}
		})
	}
}

// TestSkipIfNotLeaderInAChain wraps a job in a chain with robfig/cron's own wrappers, in
// both orders: the job runs only while the Elector leads, and a panic in it is recovered by
// cron.Recover wherever SkipIfNotLeader stands.
func TestSkipIfNotLeaderInAChain(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	e := leader.New(newLocker(t, r, r.Client), "leader")
	var runs atomic.Int32
	var sk skips
	job := cron.FuncJob(func() {
		runs.Add(1)
		panic("the job fails")
	})
	logger := cron.PrintfLogger(discard{})
	skip := cronfence.SkipIfNotLeader(e, cronfence.WithSkipHandler(sk.add))
	chains := map[string]cron.Chain{
		"skip inside":  cron.NewChain(cron.Recover(logger), cron.SkipIfStillRunning(logger), skip),
		"skip outside": cron.NewChain(skip, cron.Recover(logger)),
	}
	for name, chain := range chains {
		chain.Then(job).Run()
		if runs.Load() != 0 || len(sk.take()) != 1 {
			t.Fatalf("%s, before Run: got %d runs, want the run skipped", name, runs.Load())
		}
	}
	campaign(t, e)
	waitLeading(t, e)
	for name, chain := range chains {
		runs.Store(0)
		chain.Then(job).Run() // panics inside, recovered
		if runs.Load() != 1 || len(sk.take()) != 0 {
			t.Fatalf("%s, leading: got %d runs, want 1 and no skip", name, runs.Load())
		}
	}
}

// discard is a cron.PrintfLogger's printer that prints nothing.
type discard struct{}

func (discard) Printf(string, ...any) {}
