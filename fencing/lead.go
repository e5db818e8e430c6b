package fencing

import (
	"context"
	"errors"
	"time"

	"github.com/fencekit/fencekit/fencing/observe"
)

// Lead makes this process the leader of name, one leader at a time across every Locker that
// uses the same Redis and prefix, and runs fn while it leads, in a loop of [Locker.Do] on name.
// A campaign is an [Locker.Acquire] of name: candidates wait in its queue, so a leader that
// resigns hands over in the same round trip, and one that dies is replaced about a round trip
// after its lease ends. A term runs fn with the leadership's token, its epoch, in fn's context
// ([TokenFromContext], [ValidUntilFromContext]): epochs strictly increase, so a store that
// checks the token refuses the late writes of a leader replaced without knowing it. When
// leadership is lost, fn's context is cancelled as Do's is, and once fn returns Lead campaigns
// again; an error fn returns that matches [ErrNotHeld] also counts as lost leadership.
//
// Lead returns only when ctx ends, with ctx.Err() (a term in progress is ended first: fn's context
// is cancelled and leadership released); when fn returns while leading and not because leadership
// was lost, after resigning (releasing the lock, so that the next candidate leads at once), with
// fn's error, or else the release's; or before campaigning with an error wrapping [ErrInvalid] (an
// empty or oversized name, a nil fn, an invalid option) or [ErrClosed]. Other errors of a campaign
// (Redis unreachable, [ErrNotReplicated], [ErrNotAcquired] under [WithMaxWait]) are retried after a
// back-off from 50ms doubling to 1s, reset after a term.
//
// Options apply to every campaign and term, as they do to one call of Do; [Shared] and
// [WithLimit] above 1 are errors wrapping ErrInvalid (a leader leads alone). Hooks observe
// each campaign and term (see observe.Hooks). No goroutine started by Lead outlives it.
func (l *Locker) Lead(ctx context.Context, name string, fn func(ctx context.Context) error, opts ...CallOption) error {
	cfg := l.config(opts)
	err := l.check(context.WithoutCancel(ctx), cfg, name)
	switch {
	case fn == nil:
		err = invalidf("nil function")
	case err == nil && !cfg.kind.Exclusive():
		err = invalidf("%s: a leader leads alone", kindName(cfg.kind))
	}
	if err != nil {
		return opErr("lead", name, err)
	}
	retry := newBackoff(campaignFirst, campaignMost)
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		lock, err := l.campaign(ctx, cfg, name)
		switch {
		case ctx.Err() != nil:
			if err == nil { // won as the context ended: resign at once
				rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), min(cfg.ttl, releaseTimeout))
				_ = lock.Release(rctx)
				cancel()
			}
			return ctx.Err()
		case errors.Is(err, ErrInvalid), errors.Is(err, ErrClosed):
			return err
		case err != nil:
			t := time.NewTimer(retry.step())
			select {
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			case <-t.C:
			}
			continue
		}
		retry = newBackoff(campaignFirst, campaignMost)
		lost, err := l.term(ctx, cfg, lock, fn)
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case lost:
			continue
		}
		return err
	}
}

// campaign waits for leadership of name once, observed as an observe.OpCampaign.
func (l *Locker) campaign(ctx context.Context, cfg *config, name string) (*Lock, error) {
	cctx, begin := cfg.hooks.start(ctx, observe.OpCampaign, name), time.Now()
	lock, err := l.acquire(cctx, cfg, name)
	ev := observe.Event{Op: observe.OpCampaign, Resource: name, Elapsed: time.Since(begin)}
	if err != nil {
		ev.Outcome, ev.Err = outcomeOf(err), err
	} else {
		ev.Outcome, ev.Token = observe.OutcomeAcquired, lock.token
	}
	cfg.hooks.end(cctx, ev)
	return lock, err
}

// term runs fn while lock lasts, observed as an observe.OpLead, and reports whether it was lost.
func (l *Locker) term(ctx context.Context, cfg *config, lock *Lock, fn func(ctx context.Context) error) (lost bool, err error) {
	tctx := cfg.hooks.start(ctx, observe.OpLead, lock.resource)
	err = l.hold(tctx, cfg, []*Lock{lock}, nil, fn)
	lost = errors.Is(err, ErrNotHeld)
	ev := observe.Event{Op: observe.OpLead, Resource: lock.resource, Token: lock.token, Outcome: observe.OutcomeResigned, Held: time.Since(lock.acquired)}
	switch {
	case lost:
		ev.Outcome, ev.Err = observe.OutcomeNotHeld, err
	case err != nil && ctx.Err() == nil:
		ev.Outcome, ev.Err = observe.OutcomeError, err
	}
	cfg.hooks.end(tctx, ev)
	return lost, err
}
