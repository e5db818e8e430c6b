package cronfence_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/robfig/cron/v3"

	"github.com/fencekit/fencekit/cronfence"
	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/internal/testkit/redistest"
	"github.com/fencekit/fencekit/leader"
)

// TestFuncSkips runs a job made by Func once per case: it runs while its Elector leads, and
// is skipped otherwise, with the reason given to the skip handler.
func TestFuncSkips(t *testing.T) {
	t.Parallel()
	for _, tc := range skipCases(t) {
		t.Run(tc.name, func(t *testing.T) {
			var ran atomic.Int32
			fn := func(context.Context) { ran.Add(1) }
			if tc.nilJob {
				fn = nil
			}
			var sk skips
			opts := append([]cronfence.Option{cronfence.WithSkipHandler(sk.add)}, tc.opts...)
			tc.check(t, cronfence.Func(tc.elector, fn, opts...), &ran, &sk)
		})
	}
}

type baseKey struct{}

// TestFuncToken checks the context Func gives the function: the base context's values, and
// the term's token, equal to the Elector's epoch; after a new term, the new and higher epoch.
func TestFuncToken(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	e := leader.New(newLocker(t, r, r.Client), "leader")
	type seen struct {
		token, epoch int64
		ok           bool
		base         any
	}
	got := make(chan seen, 1)
	var sk skips
	job := cronfence.Func(e, func(ctx context.Context) {
		token, ok := fencing.TokenFromContext(ctx)
		epoch, _ := e.Token()
		got <- seen{token, epoch, ok, ctx.Value(baseKey{})}
	}, cronfence.WithSkipHandler(sk.add), cronfence.WithBaseContext(func() context.Context {
		return context.WithValue(context.Background(), baseKey{}, "base")
	}))
	var terms []int64
	for term := range 3 {
		stop := campaign(t, e)
		epoch := waitLeading(t, e)
		job.Run()
		if errs := sk.take(); len(errs) != 0 {
			t.Fatalf("term %d: skipped: %v", term, errs)
		}
		s := <-got
		if !s.ok || s.token != epoch || s.epoch != epoch || s.base != "base" {
			t.Fatalf("term %d: the function saw token %d (%v), Token() %d and base value %v; want token %d, Token() %d and %q",
				term, s.token, s.ok, s.epoch, s.base, epoch, epoch, "base")
		}
		if len(terms) > 0 && epoch <= terms[len(terms)-1] {
			t.Fatalf("term %d: epoch %d after %v, want it higher", term, epoch, terms)
		}
		terms = append(terms, epoch)
		if err := stop(); !errors.Is(err, context.Canceled) {
			t.Fatalf("Run: got %v, want context.Canceled", err)
		}
	}
	// A Func in a chain with SkipIfNotLeader is asked twice and runs once.
	campaign(t, e)
	epoch := waitLeading(t, e)
	cron.NewChain(cronfence.SkipIfNotLeader(e)).Then(job).Run()
	if s := <-got; s.token != epoch {
		t.Fatalf("in a chain: got token %d, want %d", s.token, epoch)
	}
}
