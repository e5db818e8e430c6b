package fencing

import (
	"cmp"
	"context"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/fencekit/fencekit/fencing/observe"
	"github.com/fencekit/fencekit/internal/wire"
)

// A Status is what Redis holds of one resource at one moment, as [Locker.Inspect] reads it for
// diagnostics and operators: by the time it is read, holders may have changed.
type Status struct {
	// Resource is the resource's name.
	Resource string
	// Holders are the live acquisitions that hold the resource, by token; none when it is free.
	Holders []Holder
	// Shared reports whether the holders hold the resource shared ([Shared]).
	Shared bool
	// Limit is the holders' limit: 1 exclusive, n for [WithLimit](n); 0 when free or shared.
	Limit int
	// Waiters are the calls queued for the resource, the next to be served first.
	Waiters []Waiter
	// NextToken is the lowest token the next acquisition gets: the last one plus one, or 1 with
	// no counter (at least the server's clock in microseconds with [WithServerTimeFloor]); at
	// the int64 maximum, where no acquisition succeeds, that maximum.
	NextToken int64
	// CounterTTL is how long the counter lives without a new token ([WithCounterExpiry]), or 0.
	CounterTTL time.Duration
}

// A Holder is one acquisition that holds a resource, in a [Status].
type Holder struct {
	// Token is the acquisition's fencing token.
	Token int64
	// TTL is the lease it has left, by the server's clock.
	TTL time.Duration
	// Owner identifies the acquisition: a random value of 22 characters, or for a lock granted
	// from the queue, the waiter's place in it (either followed by its label, encoded).
	Owner string
	// Label is the acquisition's label ([WithLabel]), or "".
	Label string
}

// A Waiter is one call queued for a resource, in a [Status].
type Waiter struct {
	// Locker is the id of the Locker the call waits in, random per Locker.
	Locker string
	// Label is the call's label ([WithLabel]), or "".
	Label string
	// Shared and Limit are the kind of acquisition it waits for, as in [Status].
	Shared bool
	Limit  int
	// TimeFloor and CounterExpiry ([WithServerTimeFloor], [WithCounterExpiry]) rule its token.
	TimeFloor     bool
	CounterExpiry time.Duration
	// Alive reports whether its Locker still renews its place in the queue; a waiter whose
	// Locker stopped (a process that died) is skipped when it reaches the head.
	Alive bool
	// Waiting is how long its Locker has been waiting for the resource, by its clock, when Alive.
	Waiting time.Duration
}

// Inspect reads what Redis holds of resource, in one round trip that changes nothing: its
// holders with their tokens, labels and leases, their kind, the waiters queued for it and the
// next token. An invalid resource name returns an error wrapping [ErrInvalid] and sends
// nothing; other errors come from Redis. It works on a closed Locker, and on the lock of a
// shared or limited resource in an earlier version's key layout. Hooks observe it.
func (l *Locker) Inspect(ctx context.Context, resource string) (*Status, error) {
	cfg := l.config(nil)
	ctx, begin := cfg.hooks.start(ctx, observe.OpInspect, resource), time.Now()
	st, err := (*Status)(nil), cmp.Or(l.made(), validResource(resource))
	if err == nil {
		var raw wire.State
		raw, err = (&wire.Inspect{Keys: wire.For(l.cfg.prefix, resource)}).Run(ctx, l.client)
		st = statusOf(resource, raw)
	}
	if err != nil {
		err = opErr("inspect", resource, err)
	}
	e := observe.Event{Op: observe.OpInspect, Resource: resource, Outcome: observe.OutcomeOK, Elapsed: time.Since(begin)}
	if err != nil {
		st, e.Outcome, e.Err = nil, observe.OutcomeError, err
	}
	cfg.hooks.end(ctx, e)
	return st, err
}

// statusOf returns the Status of what the inspect script read of resource.
func statusOf(resource string, raw wire.State) *Status {
	st := &Status{Resource: resource, NextToken: raw.Counter + 1, CounterTTL: raw.CounterTTL}
	if raw.Counter == math.MaxInt64 {
		st.NextToken = math.MaxInt64 // none: the next acquisition fails
	}
	if len(raw.Holders) > 0 {
		k, _ := wire.ParseKind(strings.TrimPrefix(raw.Kind, "old:")) // shared: Limit 0
		st.Shared, st.Limit = k.Shared, k.Limit
	}
	for _, h := range raw.Holders {
		st.Holders = append(st.Holders, Holder{Token: h.Token, TTL: h.End.Sub(raw.Now), Owner: h.Owner, Label: wire.LabelOf(h.Owner)})
	}
	slices.SortFunc(st.Holders, func(a, b Holder) int { return cmp.Compare(a.Token, b.Token) })
	for _, e := range raw.Queue {
		el, ok := wire.ParseElement(e)
		if !ok {
			continue
		}
		w := Waiter{Locker: el.Locker, Label: el.Label, Shared: el.Kind.Shared, Limit: max(el.Kind.Limit, 1), TimeFloor: el.Floor, CounterExpiry: el.Expiry}
		if w.Shared {
			w.Limit = 0
		}
		if v := raw.Waiting[el.Locker]; v != "" {
			w.Alive = true
			if since, ok := wire.ParseWaiterValue(v); ok {
				w.Waiting = max(raw.Now.Sub(since), 0)
			}
		}
		st.Waiters = append(st.Waiters, w)
	}
	return st
}

// ForceRelease frees resource from its holder with token, as that holder's Release would (the
// next waiters get it at once; the holder's Release and Extend then return [ErrNotHeld]). It is
// for operators freeing a lock whose holder is stuck (fencekit release --force): the holder is
// not told and may still be working, so this is safe for data only when the store checks tokens.
// It returns an error wrapping ErrNotHeld, changing nothing, when no holder has token (released,
// expired or replaced meanwhile); [ErrInvalid] for an invalid name, sending nothing; other
// errors come from Redis. Hooks observe it, with the holder's token and label.
func (l *Locker) ForceRelease(ctx context.Context, resource string, token int64) error {
	cfg := l.config(nil)
	ctx, begin := cfg.hooks.start(ctx, observe.OpForceRelease, resource), time.Now()
	e := observe.Event{Op: observe.OpForceRelease, Resource: resource, Token: token, Outcome: observe.OutcomeOK}
	st, err := l.Inspect(ctx, resource) // its error names the call that failed
	if err == nil {
		err = ErrNotHeld
		if i := slices.IndexFunc(st.Holders, func(h Holder) bool { return h.Token == token }); i >= 0 {
			// By its owner alone ("<owner>:", one acquisition's), which leaves no release
			// record: the holder's own Release, finding none, returns ErrNotHeld.
			h := st.Holders[i]
			e.Label = h.Label
			r := &wire.Release{Keys: []wire.Keys{wire.For(l.cfg.prefix, resource)}, Values: []string{h.Owner + ":"}, Kind: wire.Kind{Shared: st.Shared, Limit: st.Limit}}
			err = l.release(ctx, r)[0][0]
		}
		err = opErr("force release", resource, err)
	}
	e.Elapsed = time.Since(begin)
	if err != nil {
		e.Outcome, e.Err = outcomeOf(err), err
	}
	cfg.hooks.end(ctx, e)
	return err
}
