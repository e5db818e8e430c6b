package errorstest

import (
	"context"
	"strings"
	"testing"

	"github.com/robfig/cron/v3"

	"github.com/fencekit/fencekit/cronfence"
	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/fencing/observe"
	"github.com/fencekit/fencekit/leader"
)

// onOp returns hooks that signal on the returned channel when an operation op starts, at most
// once until the signal is received.
func onOp(op observe.Op) (fencing.CallOption, <-chan struct{}) {
	c := make(chan struct{}, 1)
	return fencing.WithHooks(observe.Hooks{Start: func(ctx context.Context, o observe.Op, _ string) context.Context {
		if o == op {
			select {
			case c <- struct{}{}:
			default:
			}
		}
		return ctx
	}}), c
}

// running runs el.Run until t ends, and returns once the campaign has started (opts of the
// elector must include the hooks of onOp(observe.OpCampaign), whose channel is started).
func running(t *testing.T, el *leader.Elector, started <-chan struct{}) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- el.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	select {
	case <-started:
	case err := <-done:
		t.Fatalf("Run returned %v", err)
	}
}

// campaigning returns an Elector of name that is running and campaigning while another
// process leads (holds name).
func campaigning(t *testing.T, e *env, name string) *leader.Elector {
	t.Helper()
	e.hold(t, name)
	hooks, started := onOp(observe.OpCampaign)
	el := leader.New(e.locker, name, hooks)
	running(t, el, started)
	return el
}

const leaderPrefix = "leader: "

func leaderCases() []errCase {
	notLeader := []error{leader.ErrNotLeader}
	invalidNotLeader := []error{leader.ErrNotLeader, fencing.ErrInvalid}
	invalid := []error{fencing.ErrInvalid}
	var nilElector *leader.Elector
	return []errCase{
		{"leader.Elector.IsLeader/ErrNotLeader/not-running", leaderPrefix, notLeader, func(t *testing.T) error {
			return leader.New(newEnv(t).locker, "n").IsLeader(t.Context())
		}},
		{"leader.Elector.IsLeader/ErrNotLeader/campaigning", leaderPrefix, notLeader, func(t *testing.T) error {
			return campaigning(t, newEnv(t), "n").IsLeader(t.Context())
		}},
		{"leader.Elector.IsLeader/ErrNotLeader+Canceled", leaderPrefix, []error{leader.ErrNotLeader, context.Canceled}, func(t *testing.T) error {
			ctx, cancel := context.WithCancel(t.Context())
			cancel()
			return leader.New(newEnv(t).locker, "n").IsLeader(ctx)
		}},
		{"leader.Elector.IsLeader/ErrNotLeader+ErrInvalid/nil-locker", leaderPrefix, invalidNotLeader, func(t *testing.T) error {
			return leader.New(nil, "n").IsLeader(t.Context())
		}},
		{"leader.Elector.IsLeader/ErrNotLeader+ErrInvalid/empty-name", leaderPrefix, invalidNotLeader, func(t *testing.T) error {
			return leader.New(newEnv(t).locker, "").IsLeader(t.Context())
		}},
		{"leader.Elector.IsLeader/ErrNotLeader+ErrInvalid/nil-elector", leaderPrefix, invalidNotLeader, func(t *testing.T) error {
			return nilElector.IsLeader(t.Context())
		}},
		{"leader.Elector.Run/ErrInvalid/nil-locker", leaderPrefix, invalid, func(t *testing.T) error {
			return leader.New(nil, "n").Run(t.Context())
		}},
		{"leader.Elector.Run/ErrInvalid/empty-name", leaderPrefix, invalid, func(t *testing.T) error {
			return leader.New(newEnv(t).locker, "").Run(t.Context())
		}},
		{"leader.Elector.Run/ErrInvalid/nil-context", leaderPrefix, invalid, func(t *testing.T) error {
			var ctx context.Context // the call's mistake this case makes
			return leader.New(newEnv(t).locker, "n").Run(ctx)
		}},
		{"leader.Elector.Run/ErrInvalid/running", leaderPrefix, invalid, func(t *testing.T) error {
			return campaigning(t, newEnv(t), "n").Run(t.Context())
		}},
		// The errors of Locker.Lead, which Run returns as they are.
		{"leader.Elector.Run/ErrInvalid/long-name", core, invalid, func(t *testing.T) error {
			return leader.New(newEnv(t).locker, strings.Repeat("n", fencing.MaxResourceLen+1)).Run(t.Context())
		}},
		{"leader.Elector.Run/ErrInvalid/option", core, invalid, func(t *testing.T) error {
			return leader.New(newEnv(t).locker, "n", fencing.Shared()).Run(t.Context())
		}},
		{"leader.Elector.Run/ErrClosed", core, []error{fencing.ErrClosed}, func(t *testing.T) error {
			return leader.New(newEnv(t).closed(t), "n").Run(t.Context())
		}},
	}
}

const cronPrefix = "cronfence: "

// skipped runs job once and returns the error its skip handler got, or nil if it ran.
func skipped(job func(opts ...cronfence.Option) cron.Job, opts ...cronfence.Option) error {
	var got error
	job(append(opts, cronfence.WithSkipHandler(func(err error) { got = err }))...).Run()
	return got
}

func cronCases() []errCase {
	notLeader := []error{leader.ErrNotLeader}
	invalid := []error{fencing.ErrInvalid}
	ran := func(context.Context) {}
	wrap := func(el *leader.Elector, job cron.Job) func(opts ...cronfence.Option) cron.Job {
		return func(opts ...cronfence.Option) cron.Job {
			return cron.NewChain(cronfence.SkipIfNotLeader(el, opts...)).Then(job)
		}
	}
	fn := func(el *leader.Elector, f func(context.Context)) func(opts ...cronfence.Option) cron.Job {
		return func(opts ...cronfence.Option) cron.Job { return cronfence.Func(el, f, opts...) }
	}
	done := func() context.Context {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		return ctx
	}
	return []errCase{
		{"cronfence.SkipIfNotLeader/ErrNotLeader", leaderPrefix, notLeader, func(t *testing.T) error {
			return skipped(wrap(leader.New(newEnv(t).locker, "n"), cron.FuncJob(func() {})))
		}},
		{"cronfence.SkipIfNotLeader/ErrNotLeader/campaigning", leaderPrefix, notLeader, func(t *testing.T) error {
			return skipped(wrap(campaigning(t, newEnv(t), "n"), cron.FuncJob(func() {})))
		}},
		{"cronfence.SkipIfNotLeader/ErrNotLeader+ErrInvalid", leaderPrefix, []error{leader.ErrNotLeader, fencing.ErrInvalid}, func(t *testing.T) error {
			return skipped(wrap(leader.New(nil, "n"), cron.FuncJob(func() {})))
		}},
		{"cronfence.SkipIfNotLeader/ErrNotLeader+Canceled", leaderPrefix, []error{leader.ErrNotLeader, context.Canceled}, func(t *testing.T) error {
			return skipped(wrap(leader.New(newEnv(t).locker, "n"), cron.FuncJob(func() {})), cronfence.WithBaseContext(done))
		}},
		{"cronfence.SkipIfNotLeader/ErrInvalid/nil-job", cronPrefix, invalid, func(t *testing.T) error {
			return skipped(wrap(leader.New(newEnv(t).locker, "n"), nil))
		}},
		{"cronfence.SkipIfNotLeader/ErrInvalid/nil-context", cronPrefix, invalid, func(t *testing.T) error {
			return skipped(wrap(leader.New(newEnv(t).locker, "n"), cron.FuncJob(func() {})),
				cronfence.WithBaseContext(func() context.Context { return nil }))
		}},
		{"cronfence.Func/ErrNotLeader", leaderPrefix, notLeader, func(t *testing.T) error {
			return skipped(fn(leader.New(newEnv(t).locker, "n"), ran))
		}},
		{"cronfence.Func/ErrNotLeader+ErrInvalid", leaderPrefix, []error{leader.ErrNotLeader, fencing.ErrInvalid}, func(t *testing.T) error {
			return skipped(fn(nil, ran))
		}},
		{"cronfence.Func/ErrInvalid/nil-func", cronPrefix, invalid, func(t *testing.T) error {
			return skipped(fn(leader.New(newEnv(t).locker, "n"), nil))
		}},
		{"cronfence.Func/ErrInvalid/nil-context", cronPrefix, invalid, func(t *testing.T) error {
			return skipped(fn(leader.New(newEnv(t).locker, "n"), ran), cronfence.WithBaseContext(func() context.Context { return nil }))
		}},
		{"cronfence.Schedule/ErrInvalid/spec", cronPrefix, invalid, func(t *testing.T) error {
			_, err := cronfence.Schedule(cron.New(), "every day", leader.New(newEnv(t).locker, "n"), ran)
			return err
		}},
		{"cronfence.Schedule/ErrInvalid/nil-cron", cronPrefix, invalid, func(t *testing.T) error {
			_, err := cronfence.Schedule(nil, "@daily", leader.New(newEnv(t).locker, "n"), ran)
			return err
		}},
		{"cronfence.Schedule/ErrInvalid/nil-elector", cronPrefix, invalid, func(t *testing.T) error {
			_, err := cronfence.Schedule(cron.New(), "@daily", nil, ran)
			return err
		}},
		{"cronfence.Schedule/ErrInvalid/nil-func", cronPrefix, invalid, func(t *testing.T) error {
			_, err := cronfence.Schedule(cron.New(), "@daily", leader.New(newEnv(t).locker, "n"), nil)
			return err
		}},
		{"cronfence.Schedule/ErrNotLeader", leaderPrefix, notLeader, func(t *testing.T) error {
			// A run on its tick (every second, the shortest spec) on a replica that does
			// not lead.
			c := cron.New(cron.WithSeconds())
			skips := make(chan error, 1)
			_, err := cronfence.Schedule(c, "* * * * * *", leader.New(newEnv(t).locker, "n"), ran, cronfence.WithSkipHandler(func(err error) {
				select {
				case skips <- err:
				default:
				}
			}))
			if err != nil {
				t.Fatal(err)
			}
			c.Start()
			defer func() { <-c.Stop().Done() }()
			return <-skips
		}},
		{"cronfence.Schedule/no-tick", cronPrefix, nil, func(t *testing.T) error {
			c := cron.New()
			var got error
			id, err := cronfence.Schedule(c, "@daily", leader.New(newEnv(t).locker, "n"), ran, cronfence.WithSkipHandler(func(e error) { got = e }))
			if err != nil {
				t.Fatal(err)
			}
			c.Entry(id).Job.Run() // run by hand before its first tick: it has none
			return got
		}},
	}
}

func TestLeader(t *testing.T) {
	t.Parallel()
	run(t, append(leaderCases(), cronCases()...))
}
