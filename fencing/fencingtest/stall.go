// Package fencingtest helps test code that takes fencing locks: [Stall] turns the holder of a
// lock into one paused past its lease (a GC pause, a stalled call), which a test cannot easily
// produce (Do's renewals keep the lease alive; miniredis's FastForward moves Redis's clock, not
// the holder's), and [Takeover] also runs the next holder's work, so that a test shows that its
// store refuses the writes of such a holder.
package fencingtest

import (
	"context"
	"errors"
	"fmt"

	"github.com/fencekit/fencekit/fencing/internal/stall"
)

// ErrNoLock is Stall's error when ctx is not the context of work that holds a lock.
var ErrNoLock = errors.New("fencingtest: the context holds no lock of Do, DoAll or Lead")

// Stall makes the holder of the locks that ctx's work holds behave as a process paused past its
// lease. Call it inside work that holds a lock: the function of fencing.Locker.Do, DoAll or
// Lead, or a handler behind the Echo middleware (with the request's context) or the Asynq
// adapter. The holder's renewals stop and it is not told: ctx is not cancelled, and
// fencing.ValidUntilFromContext reports a lease that has ended. Each lease ends in Redis, where
// the resource goes to the next waiter or is free; every enclosing hold in ctx stalls too, as a
// whole process would. Stall returns nil once another acquisition has taken one of the
// resources (its counter moved past the holder's token), or ctx.Err() when ctx ends first.
// After it, a write with the holder's token is a paused holder's late write, which a store that
// saw the next holder's write refuses, and Do finds the lock lost (fencing.ErrNotHeld). Stall
// returns an error wrapping [ErrNoLock], changing nothing, when ctx holds no such lock. It
// works on miniredis and on Redis.
func Stall(ctx context.Context) error {
	d := stall.From(ctx)
	if d == nil {
		return ErrNoLock
	}
	if err := d.Stall(ctx); err != nil {
		if ctx.Err() != nil {
			return err
		}
		return fmt.Errorf("fencingtest: stall: %w", err)
	}
	return nil
}

// Takeover stalls the holder of the locks that ctx's work holds, as [Stall] does, and then runs
// successor as the next holder: under a new acquisition of the same resources (those of the
// innermost Do, DoAll or Lead of ctx) by the same Locker with the same settings, renewed and
// released as Do and DoAll do, with its own token (fencing.TokenFromContext, fencing.TokenFor)
// in a context of its own (no locks or values of ctx); it waits for the resources until ctx ends.
//
// Takeover returns successor's error (matching fencing.ErrNotHeld too when its lock was lost)
// once its locks are released, so that the stalled holder's next write is a late write after
// the successor's, which a store that checks tokens refuses. It returns an error wrapping
// [ErrNoLock] when ctx holds no lock, changing nothing, and the acquisition's error, without
// calling successor, when the resources cannot be taken (ctx ended first).
func Takeover(ctx context.Context, successor func(ctx context.Context) error) error {
	d := stall.From(ctx)
	if d == nil {
		return ErrNoLock
	}
	return d.Takeover(ctx, successor)
}
