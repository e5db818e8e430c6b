package fencing

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/fencekit/fencekit/fencing/observe"
	"github.com/fencekit/fencekit/internal/wire"
)

// MaxResources is the most distinct resources one call on a set accepts.
const MaxResources = 64

// TryAcquireAll makes one attempt to take the locks of all resources together, each with its
// own fencing token, without waiting, in the canonical order (see [Locker.AcquireAll]): one
// round trip when all are free on one server or Cluster slot. When one is busy (held by another
// owner, or waiters are queued for it), the locks already taken are released and the error
// names that resource and holds a [*BusyError] (matching [ErrNotAcquired]); [RetryAfter]
// reports its holder's remaining TTL. Bad input (no resources, an invalid name, more than
// [MaxResources] distinct ones) returns an error wrapping [ErrInvalid] and sends nothing. Any
// other error means nothing is held. Options override the Locker's settings for this call.
func (l *Locker) TryAcquireAll(ctx context.Context, resources []string, opts ...CallOption) (*LockSet, error) {
	cfg := *l.config(opts)
	cfg.maxWait = 0
	return l.acquireAll(ctx, &cfg, observe.OpTryAcquireAll, resources)
}

// AcquireAll takes the locks of all resources together, each with its own fencing token, waiting
// while some are busy. The resources are deduplicated (a duplicate is no error) and taken in one
// canonical order, whatever order they are listed in, so that overlapping sets never deadlock: by
// name, or on a *redis.ClusterClient by the Cluster hash slot of their keys, then by name; none is
// waited for while a later one is held. On one server (a *redis.Client) or Cluster slot, the free
// resources at the head of the order are taken in one round trip (other slots follow). A busy one
// is waited for as [Locker.Acquire] waits, in its FIFO queue, never ahead of its waiters, while
// the locks taken are renewed every third of the TTL. With [WithReplicas], each is taken alone.
//
// When the wait ends (ctx, [WithMaxWait], which bounds the whole call, or [Locker.Close]),
// every lock already taken is released, and the error names the resource waited for and wraps
// the cause Acquire would return: it matches [ErrNotAcquired] (and ctx.Err() when the context
// ended) and holds a [*BusyError]. When a lock already taken is lost while waiting, the others
// are released too and the error matches ErrNotAcquired and [ErrNotHeld], naming the lost
// resource. Bad input is refused as by [Locker.TryAcquireAll], sending nothing.
func (l *Locker) AcquireAll(ctx context.Context, resources []string, opts ...CallOption) (*LockSet, error) {
	return l.acquireAll(ctx, l.config(opts), observe.OpAcquireAll, resources)
}

// acquireAll is TryAcquireAll and AcquireAll with the call's settings resolved.
func (l *Locker) acquireAll(ctx context.Context, cfg *config, op observe.Op, resources []string) (*LockSet, error) {
	ctx, begin := cfg.hooks.start(ctx, op, ""), time.Now()
	ms, err := []member(nil), l.made()
	if err == nil {
		ms, err = l.members(cfg, resources)
	}
	if err == nil {
		err = l.check(ctx, cfg, ms[0].name)
	}
	set, failed, attempts := (*LockSet)(nil), "", 0
	if err == nil {
		set, failed, attempts, err = l.takeAll(ctx, cfg, ms)
	}
	if err != nil {
		err = opErr("acquire all", failed, err)
	}
	ev := acquired(op, failed, attempts, begin, nil, err)
	for _, m := range ms {
		ev.Resources = append(ev.Resources, m.name)
	}
	if err == nil {
		for _, k := range set.locks {
			ev.ClockBehind = max(ev.ClockBehind, k.behind)
		}
	}
	cfg.hooks.end(ctx, ev)
	return set, err
}

// member is one resource of a set.
type member struct {
	name string
	keys wire.Keys
	slot uint16 // its Cluster hash slot; 0 unless the client is a Cluster's
}

// members validates resources and returns them deduplicated, in the canonical order.
func (l *Locker) members(cfg *config, resources []string) ([]member, error) {
	if !cfg.kind.Exclusive() {
		return nil, invalidf("%s applies to one resource, not to a set", kindName(cfg.kind))
	}
	if len(resources) == 0 {
		return nil, invalidf("empty set of resources")
	}
	ms := make([]member, len(resources))
	for i, r := range resources {
		if err := validResource(r); err != nil {
			return nil, err
		}
		ms[i] = member{name: r, keys: wire.For(cfg.prefix, r)}
		ms[i].slot = l.topo.Slot(ms[i].keys.Lock)
	}
	slices.SortFunc(ms, func(a, b member) int { return cmp.Or(cmp.Compare(a.slot, b.slot), strings.Compare(a.name, b.name)) })
	ms = slices.CompactFunc(ms, func(a, b member) bool { return a.name == b.name })
	if len(ms) > MaxResources {
		return nil, invalidf("%d resources exceed %d", len(ms), MaxResources)
	}
	return ms, nil
}

// attemptAll runs the set's acquire script once on g, resources of one server or slot. It
// returns the locks taken, in g's order, and when not all, the next one's BusyError; or an
// error, and then nothing is held but the locks it returns, which the caller frees.
func (l *Locker) attemptAll(ctx context.Context, cfg *config, g []member) ([]*Lock, *BusyError, error) {
	owner, err := newOwner()
	if err != nil {
		return nil, nil, err
	}
	owner = wire.Labeled(owner, cfg.label)
	a := &wire.AcquireAll{Owner: owner, Lease: millis(cfg.ttl), Floor: cfg.timeFloor, Expiry: millis(cfg.expiry), Publish: l.room.publish}
	for _, m := range g {
		a.Keys = append(a.Keys, m.keys)
	}
	sent := time.Now()
	r, err := a.Run(ctx, l.client)
	if err != nil {
		if lostReply(context.Background(), err) {
			l.releaseOwner(ctx, cfg, a.Keys, owner) // the script may have run
		}
		if ctx.Err() != nil {
			return nil, nil, fmt.Errorf("%w: %w", ErrNotAcquired, ctx.Err())
		}
		return nil, nil, err
	}
	locks := make([]*Lock, len(r.Tokens))
	for i, token := range r.Tokens {
		locks[i] = l.newLock(cfg, g[i].name, g[i].keys, owner, token, sent, millis(cfg.ttl))
		locks[i].behind = time.Duration(r.Behind) * time.Microsecond
	}
	switch {
	case r.Code == wire.Mismatch:
		have, _ := wire.ParseKind(r.Kind)
		return locks, nil, invalidf("the live holders of %q are %s, this call exclusive (limit 1); a new kind takes effect once the resource is idle", g[len(locks)].name, kindName(have))
	case r.Code == wire.Layout:
		return locks, nil, ErrLayout
	case ctx.Err() != nil:
		l.releaseOwner(ctx, cfg, a.Keys, owner)
		return nil, nil, fmt.Errorf("%w: %w", ErrNotAcquired, ctx.Err())
	case len(locks) > 0 && !locks[0].valid():
		l.releaseOwner(ctx, cfg, a.Keys, owner) // a late reply, as in try
		return nil, &BusyError{Resource: g[0].name, Ahead: -1, late: true}, nil
	case r.Code == wire.Busy:
		return locks, busyWith(g[len(locks)].name, r.Left), nil
	}
	return locks, nil, nil
}

// takeAll takes ms in order; it returns the set, or the failed resource and cause, and attempts.
func (l *Locker) takeAll(ctx context.Context, cfg *config, ms []member) (set *LockSet, failed string, attempts int, err error) {
	set = &LockSet{locker: l, hooks: cfg.hooks, locks: make([]*Lock, 0, len(ms))}
	var deadline time.Time
	if cfg.maxWait > 0 {
		deadline = time.Now().Add(cfg.maxWait)
	}
	// While waiting, the locks already taken are renewed; losing one ends the wait.
	var keep []*renewer
	wait, lose := ctx, context.CancelCauseFunc(nil)
	renew := func(k *Lock) {
		if lose == nil {
			wait, lose = context.WithCancelCause(ctx)
		}
		h := &hold{locks: []*Lock{k}}
		keep = append(keep, startRenewer(wait, cfg, h.locks, h.extend, func(*Lock) context.CancelCauseFunc { return named(lose, k.resource) }))
	}
	defer func() {
		for _, r := range keep {
			r.stop()
		}
		if lose != nil {
			var lost *opError
			if cause := context.Cause(wait); err != nil && ctx.Err() == nil && errors.As(cause, &lost) {
				// The set was not acquired, because a lock already taken was lost.
				failed, err = lost.resource, fmt.Errorf("%w: %w", ErrNotAcquired, lost.err)
			}
			lose(nil)
		}
		if err != nil {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), min(cfg.ttl, releaseTimeout))
			set.release(rctx)
			cancel()
			set = nil
			return
		}
		ttl := time.Duration(millis(cfg.ttl)) * time.Millisecond
		for _, k := range set.locks {
			k.keepUp(ttl)
		}
	}()
	for start := 0; start < len(ms); {
		// The next run that one script can take (see groupKeys; one each with WithReplicas).
		end := start + 1
		if l.topo.OneScript() && cfg.replicas == 0 {
			for end < len(ms) && ms[end].slot == ms[start].slot {
				end++
			}
		}
		g := ms[start:end]
		start = end
		if cfg.replicas == 0 {
			attempts++
			var locks []*Lock
			var busy *BusyError
			if len(g) == 1 {
				var lock *Lock
				lock, busy, err = l.attempt(wait, cfg, g[0].name, g[0].keys, "", "")
				if lock != nil {
					locks = []*Lock{lock}
				}
			} else {
				locks, busy, err = l.attemptAll(wait, cfg, g)
			}
			set.locks = append(set.locks, locks...)
			switch {
			case err != nil:
				return set, g[len(locks)].name, attempts, err
			case busy == nil:
				continue
			case cfg.maxWait == 0:
				return set, busy.Resource, attempts, busy
			}
			g = g[len(locks):]
		}
		for _, m := range g {
			if lose == nil {
				for _, k := range set.locks {
					renew(k)
				}
			}
			wcfg := *cfg
			if !deadline.IsZero() {
				wcfg.maxWait = max(time.Until(deadline), 0)
			}
			lock, n, err := l.wait(wait, &wcfg, m.name)
			attempts += n
			if err != nil {
				return set, m.name, attempts, err
			}
			set.locks = append(set.locks, lock)
			renew(lock)
		}
	}
	return set, "", attempts, nil
}
