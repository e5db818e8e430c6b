package fencing

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/fencekit/fencekit/fencing/observe"

	"github.com/fencekit/fencekit/internal/wire"
)

// MaxResources is the most distinct resources one call on a set accepts.
const MaxResources = 64

// A LockSet is one acquisition of several resources' locks, each with its own fencing token,
// taken by [Locker.TryAcquireAll] or [Locker.AcquireAll]. Its methods are safe for concurrent
// use. The methods of a nil *LockSet (or a zero LockSet) return an error matching
// [ErrNotHeld] and [ErrInvalid], so `defer set.Release(ctx)` is safe after a failed acquire.
type LockSet struct {
	locker *Locker
	hooks  hookList
	locks  []*Lock // in the order taken: the canonical order
}

// Locks returns the set's locks in the order they were taken, which is the canonical order
// (see [Locker.AcquireAll]). The slice is a copy; the locks are the set's own, so releasing one
// of them releases it for the set too.
func (s *LockSet) Locks() []*Lock {
	if s == nil {
		return nil
	}
	return slices.Clone(s.locks)
}

// Token returns the fencing token of resource in the set, or 0 when resource is not in it.
// Pass each resource's token to the writes of that resource.
func (s *LockSet) Token(resource string) int64 {
	if s == nil {
		return 0
	}
	for _, k := range s.locks {
		if k.resource == resource {
			return k.token
		}
	}
	return 0
}

// Release frees every lock of the set that this acquisition still holds, in one round trip
// per server (a pipeline), handing each to its resource's longest-waiting waiter as
// [Lock.Release] does. It returns nil when all were released; otherwise the errors of the
// others joined, each naming its resource: one wrapping [ErrNotHeld] for a lock that had
// expired, passed on or been released already (nothing is changed for it), a Redis error for
// one that then stays held until its TTL runs out.
func (s *LockSet) Release(ctx context.Context) error {
	if s == nil || len(s.locks) == 0 {
		return opErr("release", "", errNoLock("LockSet"))
	}
	return joinAll(nonNil(s.releaseAll(ctx)))
}

// releaseAll releases the set's locks, observed by the hooks as one observe.OpReleaseAll, and returns
// the error of each, nil for those released.
func (s *LockSet) releaseAll(ctx context.Context) []error {
	ctx = s.hooks.start(ctx, observe.OpReleaseAll, "")
	begin := time.Now()
	errs := s.release(ctx)
	ev := s.event(observe.OpReleaseAll, begin, joinAll(nonNil(errs)), errs)
	ev.Held = time.Since(s.locks[0].acquired)
	s.hooks.end(ctx, ev)
	return errs
}

// release releases the set's locks and returns the error of each, nil for those released.
func (s *LockSet) release(ctx context.Context) []error {
	errs := make([]error, len(s.locks))
	var ks []wire.Keys
	var values []string
	var which []int
	keep := false
	for i, k := range s.locks {
		k.stopLater()
		if k.released.Load() {
			errs[i] = opErr("release", k.resource, ErrNotHeld)
			continue
		}
		ks, values, which = append(ks, k.keys), append(values, k.value), append(which, i)
		keep = keep || k.keepRecord()
	}
	held, rerrs := s.locker.release(ctx, ks, values, mode{}, keep)
	for j, i := range which {
		errs[i] = s.locks[i].releasedAs(held[j], rerrs[j])
	}
	return errs
}

// Extend resets the TTL of every lock of the set to ttl, counted from now, in one round trip
// per server, for the locks this acquisition still holds; it never takes a free lock again.
// It returns nil when all were extended, or the errors of the others joined, each naming its
// resource (wrapping [ErrNotHeld] for a lock no longer held, which is left as it is). A ttl
// outside [MinTTL, MaxTTL] returns an error wrapping [ErrInvalid] and sends nothing.
func (s *LockSet) Extend(ctx context.Context, ttl time.Duration) error {
	if s == nil || len(s.locks) == 0 {
		return opErr("extend", "", errNoLock("LockSet"))
	}
	for _, k := range s.locks {
		k.stopLater()
	}
	errs, err := s.extendAll(ctx, ttl, observe.OpExtendAll)
	if err != nil {
		return err
	}
	return joinAll(nonNil(errs))
}

// extendAll extends every lock of the set to ttl in one pipeline, as op for the hooks (one
// event for the set), and returns the error of each lock, or an error wrapping ErrInvalid
// for a ttl out of range, when it sends nothing.
func (s *LockSet) extendAll(ctx context.Context, ttl time.Duration, op observe.Op) ([]error, error) {
	ctx = s.hooks.start(ctx, op, "")
	begin := time.Now()
	if err := validTTL(ttl); err != nil {
		s.hooks.end(ctx, s.event(op, begin, err, nil))
		return nil, err
	}
	ms := millis(ttl)
	calls := make([]wire.Call, len(s.locks))
	for i, k := range s.locks {
		calls[i] = wire.Call{Keys: []string{k.keys.Lock}, Args: k.extendArgs(ms)}
	}
	cmds := wire.Extend.Pipe(ctx, s.locker.client, calls)
	errs := make([]error, len(s.locks))
	for i, k := range s.locks {
		res, err := cmds[i].Result()
		errs[i] = k.extended(begin, ms, res, err)
	}
	s.hooks.end(ctx, s.event(op, begin, joinAll(nonNil(errs)), errs))
	return errs, nil
}

// event returns the hooks' event of an operation on the whole set; errs holds the error of
// each lock, if known.
func (s *LockSet) event(op observe.Op, begin time.Time, err error, errs []error) observe.Event {
	e := observe.Event{Op: op, Resources: s.names(), Outcome: observe.OutcomeOK, Elapsed: time.Since(begin)}
	if err != nil {
		e.Outcome, e.Err = outcomeOf(err), err
		for i, x := range errs {
			if x != nil {
				e.Resource = s.locks[i].resource
				break
			}
		}
	}
	return e
}

func (s *LockSet) names() []string {
	names := make([]string, len(s.locks))
	for i, k := range s.locks {
		names[i] = k.resource
	}
	return names
}

// TryAcquireAll makes one attempt to take the locks of all resources together, each with its
// own fencing token, without waiting. Resources are deduplicated and taken in the canonical
// order (see [Locker.AcquireAll]); when they all live on one server (a *redis.Client) or in
// one Cluster slot and all are free, that takes one round trip. When one is busy (held by
// another owner, or waiters are queued for it), the locks already taken are released before
// TryAcquireAll returns an error wrapping [ErrNotAcquired] that names that resource;
// [RetryAfter] reports its holder's remaining TTL. Bad input (no resources, an invalid name,
// more than [MaxResources] distinct ones) returns an error wrapping [ErrInvalid] and sends
// nothing. Any other error means nothing is held. Options override the Locker's settings for
// this call.
func (l *Locker) TryAcquireAll(ctx context.Context, resources []string, opts ...CallOption) (*LockSet, error) {
	if l == nil {
		return nil, opErr("acquire all", "", errNilLocker)
	}
	cfg := *l.cfg.with(opts)
	cfg.maxWait = 0
	return l.acquireAll(ctx, &cfg, observe.OpTryAcquireAll, resources)
}

// AcquireAll takes the locks of all resources together, each with its own fencing token,
// waiting while some are busy.
//
// The resources are deduplicated (a duplicate is not an error) and taken in one canonical
// order, whatever order the caller listed them in, so that two calls with overlapping sets
// never deadlock: by name, or on a *redis.ClusterClient by the Cluster hash slot of the
// resource's keys, then by name. AcquireAll never waits for a resource while holding one
// that comes later in that order. When the resources share one server (a *redis.Client) or
// one Cluster slot (resources in different slots are taken one slot after the other), the free
// ones at the head of the order are taken in one round trip, all of them when all are free. A
// busy resource is then waited for as [Locker.Acquire] waits: in its FIFO queue, behind the
// waiters of that single resource, never ahead of them. Meanwhile the locks already taken are
// held and their leases renewed every third of the TTL. With [WithReplicas], each resource is
// taken on its own, with its WAIT.
//
// When the wait ends (ctx, [WithMaxWait], which bounds the whole call, or [Locker.Close]),
// every lock already taken is released before AcquireAll returns an error that names the
// resource it waited for and wraps its [Locker.Acquire] error: it matches [ErrNotAcquired]
// (and ctx.Err() when the context ended), and [RetryAfter] and [BusyResource] work on it. When
// a lock already taken is lost while waiting (its renewal finds it gone), the others are
// released too and the error matches both ErrNotAcquired and [ErrNotHeld], naming the lost
// resource. Bad
// input returns an error wrapping [ErrInvalid] as for [Locker.TryAcquireAll], and sends
// nothing.
func (l *Locker) AcquireAll(ctx context.Context, resources []string, opts ...CallOption) (*LockSet, error) {
	if l == nil {
		return nil, opErr("acquire all", "", errNilLocker)
	}
	return l.acquireAll(ctx, l.cfg.with(opts), observe.OpAcquireAll, resources)
}

// acquireAll is TryAcquireAll and AcquireAll with the call's settings resolved.
func (l *Locker) acquireAll(ctx context.Context, cfg *config, op observe.Op, resources []string) (*LockSet, error) {
	ctx = cfg.hooks.start(ctx, op, "")
	begin := time.Now()
	ms, err := l.members(cfg, resources)
	if err == nil {
		err = l.check(ctx, cfg, ms[0].name)
	}
	var set *LockSet
	var failed string
	attempts := 0
	if err == nil {
		set, failed, attempts, err = l.takeAll(ctx, cfg, ms)
	}
	ev := observe.Event{Op: op, Resource: failed, Attempts: attempts, Elapsed: time.Since(begin)}
	if len(ms) > 0 {
		ev.Resources = make([]string, len(ms))
		for i, m := range ms {
			ev.Resources[i] = m.name
		}
	}
	if err != nil {
		ev.Outcome, ev.Err = outcomeOf(err), err
	} else {
		ev.Outcome = observe.OutcomeAcquired
		for _, k := range set.locks {
			ev.ClockBehind = max(ev.ClockBehind, k.behind)
		}
	}
	cfg.hooks.end(ctx, ev)
	return set, err
}

// members validates resources and returns them deduplicated, in the canonical order.
func (l *Locker) members(cfg *config, resources []string) ([]member, error) {
	if !cfg.mode.Exclusive() {
		return nil, invalidf("%s applies to one resource, not to a set", kindName(cfg.mode))
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
	slices.SortFunc(ms, func(a, b member) int {
		if c := cmp.Compare(a.slot, b.slot); c != 0 {
			return c
		}
		return strings.Compare(a.name, b.name)
	})
	ms = slices.CompactFunc(ms, func(a, b member) bool { return a.name == b.name })
	if len(ms) > MaxResources {
		return nil, invalidf("%d resources exceed %d", len(ms), MaxResources)
	}
	return ms, nil
}

// groups splits ms, in order, into the runs that one script can take: all of them on one
// server, those of one slot on a Cluster, one each on a Ring (which spreads resources over
// servers), and one each with WithReplicas (each takes its own WAIT).
func (l *Locker) groups(cfg *config, ms []member) [][]member {
	var gs [][]member
	for start := 0; start < len(ms); {
		end := start + 1
		if l.topo.OneScript() && cfg.replicas == 0 {
			for end < len(ms) && ms[end].slot == ms[start].slot {
				end++
			}
		}
		gs = append(gs, ms[start:end])
		start = end
	}
	return gs
}

// takeAll takes the locks of ms in order (see AcquireAll). It returns the set, or the
// resource that failed and the error; attempts counts the acquire scripts sent.
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
			if cause := context.Cause(wait); err != nil && ctx.Err() == nil && errors.Is(cause, ErrNotHeld) {
				// The set was not acquired, because a lock already taken was lost.
				err, failed = opErr("acquire all", "", join(ErrNotAcquired, cause)), ""
				var op *opError
				if errors.As(cause, &op) {
					failed = op.resource
				}
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
	for _, g := range l.groups(cfg, ms) {
		if cfg.replicas == 0 {
			attempts++
			locks, r, err := l.attempt(wait, cfg, g, "", "")
			set.locks = append(set.locks, locks...)
			if err != nil {
				return set, g[len(locks)].name, attempts, opErr("acquire all", "", err)
			}
			if r.busy == nil {
				continue
			}
			if cfg.maxWait == 0 {
				return set, r.busy.Resource, attempts, opErr("acquire all", "", r.busy)
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
				return set, m.name, attempts, opErr("acquire all", "", err)
			}
			set.locks = append(set.locks, lock)
			renew(lock)
		}
	}
	return set, "", attempts, nil
}
