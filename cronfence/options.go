package cronfence

import "context"

// An Option configures [SkipIfNotLeader], [Func] or [Schedule].
type Option interface {
	apply(*config)
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// config is what one SkipIfNotLeader, Func or Schedule call shares between its runs; it is not
// modified after newConfig returns.
type config struct {
	onSkip func(err error)        // nil: none
	base   func() context.Context // nil: context.Background
}

func newConfig(opts []Option) *config {
	c := &config{}
	for _, o := range opts {
		if o != nil {
			o.apply(c)
		}
	}
	return c
}

// WithSkipHandler sets a function called with the reason every time a run is skipped, before
// the run returns, on the run's goroutine (robfig/cron starts every run in a goroutine of its
// own, so calls can be concurrent): for a count of skipped runs, a log line, an alert when a
// run can never happen. The error matches [leader.ErrNotLeader] when the Elector does not
// lead (as it is on every replica but the leader, on every tick); it also matches
// [fencing.ErrInvalid] when it never can (a nil Elector, or one made with a nil Locker or an
// empty name), and the base context's error once that context is done (see
// [WithBaseContext]). An error that matches ErrInvalid and not ErrNotLeader means the job or
// the base context is missing; one that matches neither, a run of an entry of [Schedule]
// removed after the run was started. Default: none; a skipped run leaves no trace.
func WithSkipHandler(h func(err error)) Option {
	return optionFunc(func(c *config) { c.onSkip = h })
}

// WithBaseContext sets a function that returns the context every run starts from, as
// net/http's Server.BaseContext does for requests: the Elector is asked with it, and [Func]'s
// function gets it with the term's token added. A context that is done skips the run (its
// error then matches both [leader.ErrNotLeader] and the context's error), so the process's
// context, cancelled at shutdown, keeps runs from starting after it and tells the running
// ones to stop (robfig/cron's Stop cancels no run: the context it returns is done once the
// running ones have returned). f is called once per run. Default: context.Background(); a nil
// f means the default, and a nil context returned by f skips the run with an error wrapping
// [fencing.ErrInvalid].
func WithBaseContext(f func() context.Context) Option {
	return optionFunc(func(c *config) { c.base = f })
}

// context returns the context a run starts from, or why it cannot start.
func (c *config) context() (context.Context, error) {
	if c.base == nil {
		return context.Background(), nil
	}
	ctx := c.base()
	if ctx == nil {
		return nil, invalid("the base context function returned nil")
	}
	return ctx, nil
}

// skip reports a skipped run to the handler, if any.
func (c *config) skip(err error) {
	if c.onSkip != nil {
		c.onSkip(err)
	}
}
