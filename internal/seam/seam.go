// Package seam carries, in a context, what the module's own packages may ask of one call of
// package fencing beyond its public API: the Echo idempotency middleware's guard key and the
// commands it sends with the release (a [Call]), and the test kit's stall of a holder
// (fencingtest). Users cannot import it, so none of this is part of fencing's API.
package seam

import (
	"context"
	"errors"
	"time"
)

// ErrGuarded is the error of an acquisition refused because its [Call]'s guard key exists.
// fencing joins it with fencing.ErrNotAcquired.
var ErrGuarded = errors.New("fencing: guard key exists")

// A Call extends one call of fencing.Locker.Do. Do takes it from the context it is given;
// the work context Do gives its function carries none, so a Do nested in the work is a plain
// one. A Call is used by one Do at a time.
type Call struct {
	// Guard, when not "", names a key beside the resource's lock, "<prefix>{R}:<Guard>" (in
	// the lock's Cluster slot): the acquire script reads it first and, when it exists, takes
	// nothing and returns its value. Do then returns an error matching ErrGuarded (and
	// fencing.ErrNotAcquired) without calling its function, and Guarded holds the value.
	// A lock granted from the queue is not checked: a call that waited reads the key itself.
	Guard string

	// Set by fencing: the value of the guard key that refused the acquisition.
	Guarded string

	// Set by fencing before the acquisition: the names of the resource's lock and fence
	// (the token counter) keys, and of the guard key ("" without Guard).
	LockKey, FenceKey, GuardKey string

	// Commit, when the function sets it, is written to the guard key by Do's release script
	// itself, in the same step as the release and only while this call still holds the lock:
	// SET <guard> Commit PX CommitTTL. With CounterTTL set, the same step gives the resource's
	// counter that expiry unless it has one (PEXPIRE NX), also without a Commit. Committed
	// reports, once Do returns, whether the release found the lock held, and so wrote them;
	// when it did not (the lease lapsed), nothing was written.
	Commit     string
	CommitTTL  time.Duration
	CounterTTL time.Duration
	Committed  bool
}

type callKey struct{}

// WithCall returns a copy of ctx that carries call (nil: none).
func WithCall(ctx context.Context, call *Call) context.Context {
	return context.WithValue(ctx, callKey{}, call)
}

// CallFrom returns the Call ctx carries, or nil.
func CallFrom(ctx context.Context) *Call {
	c, _ := ctx.Value(callKey{}).(*Call)
	return c
}

// A Staller makes every hold in a context (the work of Do, DoAll, Lead, and so of the
// adapters) behave as a process paused past its lease: renewals stop, leases end, and it
// returns once another acquirer holds one of the resources, or ctx ends. fencing puts one in
// the work context it gives a function; fencingtest.Stall calls it.
type Staller func(ctx context.Context) error

type stallKey struct{}

// WithStaller returns a copy of ctx that carries s.
func WithStaller(ctx context.Context, s Staller) context.Context {
	return context.WithValue(ctx, stallKey{}, s)
}

// StallerFrom returns the Staller ctx carries, or nil.
func StallerFrom(ctx context.Context) Staller {
	s, _ := ctx.Value(stallKey{}).(Staller)
	return s
}
