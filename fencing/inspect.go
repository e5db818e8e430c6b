package fencing

import (
	"cmp"
	"context"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/fencekit/fencekit/internal/wire"
)

// A Status is what Redis holds of one resource at one moment, as [Locker.Inspect] reads it:
// for diagnostics, dashboards and operators (fencekit show and locks print it). It is a
// snapshot: by the time it is read, holders may have released, expired or been replaced.
type Status struct {
	// Resource is the resource's name.
	Resource string
	// Holders are the acquisitions that hold the resource, by token: one exclusive holder,
	// or the shared or limited holders whose lease has not ended. Empty when it is free.
	Holders []Holder
	// Shared reports whether the holders hold the resource shared ([Shared]).
	Shared bool
	// Limit is the holders' limit: 1 for an exclusive holder, n for [WithLimit](n); 0 when
	// the resource is free or shared.
	Limit int
	// Waiters are the calls queued for the resource, the next to be served first.
	Waiters []Waiter
	// NextToken is the lowest token the next acquisition of the resource gets: the last
	// token issued plus one, or 1 when the resource has no counter (with
	// [WithServerTimeFloor] it is at least the server's clock in microseconds). At the
	// int64 maximum, where no acquisition succeeds, it is that maximum.
	NextToken int64
	// CounterTTL is how long the resource's counter lives without a new token
	// ([WithCounterExpiry]); 0 when it never expires or there is none.
	CounterTTL time.Duration
}

// A Holder is one acquisition that holds a resource, in a [Status].
type Holder struct {
	// Token is the acquisition's fencing token.
	Token int64
	// TTL is the lease it has left, by the server's clock.
	TTL time.Duration
	// Owner identifies the acquisition: a random value of 22 characters, or for a lock
	// granted from the queue, the waiter's place in it (either followed by its label,
	// encoded).
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
	// Shared and Limit are the kind of acquisition it waits for, as in [Status]: Limit 1
	// for an exclusive one, 0 for a shared one.
	Shared bool
	Limit  int
	// TimeFloor and CounterExpiry are the rules its grant follows for its token
	// ([WithServerTimeFloor], [WithCounterExpiry]).
	TimeFloor     bool
	CounterExpiry time.Duration
	// Alive reports whether its Locker still renews its place in the queue; a waiter whose
	// Locker stopped (a process that died) is skipped when it reaches the head.
	Alive bool
	// Waiting is how long its Locker has been waiting for the resource, by the Locker's
	// clock, when Alive.
	Waiting time.Duration
}

// Inspect reads what Redis holds of resource, in one round trip that changes nothing: its
// holders with their tokens and leases, their kind, the waiters queued for it and the next
// token. An invalid resource name returns an error wrapping [ErrInvalid] and sends nothing;
// other errors come from Redis. It works on a closed Locker, and reads the lock of a shared
// or limited resource in the key layout of an earlier version too.
func (l *Locker) Inspect(ctx context.Context, resource string) (*Status, error) {
	if err := l.checkName(resource); err != nil {
		return nil, opErr("inspect", resource, err)
	}
	res, err := wire.Inspect.RunOn(ctx, l.client, wire.For(l.cfg.prefix, resource), "").Slice()
	if err != nil {
		return nil, opErr("inspect", resource, err)
	}
	raw, err := wire.ParseState(res)
	if err != nil {
		return nil, opErr("inspect", resource, err)
	}
	return statusOf(resource, raw), nil
}

// checkName validates a call that names one resource and sends nothing else: the Locker's
// own settings and the name.
func (l *Locker) checkName(resource string) error {
	if err := l.made(); err != nil {
		return err
	}
	return validResource(resource)
}

// statusOf returns the Status of what the inspect script read of resource.
func statusOf(resource string, raw wire.State) *Status {
	st := &Status{Resource: resource, NextToken: raw.Counter + 1, CounterTTL: raw.CounterTTL}
	if raw.Counter == math.MaxInt64 {
		st.NextToken = math.MaxInt64 // none: the next acquisition fails
	}
	if len(raw.Holders) > 0 {
		k, _ := wire.ParseKind(strings.TrimPrefix(raw.Kind, "old:"))
		st.Shared, st.Limit = k.Shared, k.Limit
		if k.Shared {
			st.Limit = 0
		}
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

// ForceRelease frees resource from its holder with token, as that holder's own Release
// would: the resource goes to the next waiters of its queue at once, with new tokens, and
// the holder's Release and Extend then return [ErrNotHeld]. It is for operators freeing a
// lock whose holder is stuck (fencekit release --force), not for the holder itself: the
// holder is not told and may still be working, so this is safe for data only when the store
// checks tokens, which refuses the old holder's later writes. It returns an error wrapping
// ErrNotHeld, and changes nothing, when no holder of resource has token (it was released,
// expired or replaced meanwhile); [ErrInvalid] for an invalid name, sending nothing; other
// errors come from Redis.
func (l *Locker) ForceRelease(ctx context.Context, resource string, token int64) error {
	st, err := l.Inspect(ctx, resource)
	if err != nil {
		return opErr("force release", resource, err)
	}
	i := slices.IndexFunc(st.Holders, func(h Holder) bool { return h.Token == token })
	if i < 0 {
		return opErr("force release", resource, ErrNotHeld)
	}
	m := mode{Shared: st.Shared, Limit: st.Limit}
	k := wire.For(l.cfg.prefix, resource)
	// By its owner alone ("<owner>:"), which leaves no release record: the holder's own
	// Release, finding none, returns ErrNotHeld. An owner is one acquisition's, which never
	// changes its token.
	held, err := l.releaseOne(ctx, k, st.Holders[i].Owner+":", m, false, nil)
	switch {
	case err != nil:
		return opErr("force release", resource, err)
	case !held:
		return opErr("force release", resource, ErrNotHeld)
	}
	return nil
}
