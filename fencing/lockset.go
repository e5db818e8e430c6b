package fencing

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/fencekit/fencekit/fencing/observe"
	"github.com/fencekit/fencekit/internal/wire"
)

// A LockSet is one acquisition of several resources' locks, each with its own fencing token,
// taken by [Locker.TryAcquireAll] or [Locker.AcquireAll]. Its methods are safe for concurrent
// use. The methods of a nil *LockSet (or a zero LockSet) return an error matching
// [ErrNotHeld] and [ErrInvalid], so `defer set.Release(ctx)` is safe after a failed acquire.
type LockSet struct {
	locker *Locker
	hooks  hookList
	locks  []*Lock // in the order taken: the canonical order
}

// Locks returns the set's locks in the canonical order, in a new slice: releasing one of them
// releases it for the set too.
func (s *LockSet) Locks() []*Lock {
	if s == nil {
		return nil
	}
	return slices.Clone(s.locks)
}

// Token returns the fencing token of resource in the set, for its writes, or 0 when not in it.
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

// Release frees every lock of the set that this acquisition still holds, in one round trip per
// server, handing each on as [Lock.Release] does. It returns nil when all were released, or the
// others' errors joined, each naming its resource: one wrapping [ErrNotHeld] for a lock that had
// expired, passed on or been released already (nothing is changed for it), a Redis error for
// one that then stays held until its TTL runs out.
func (s *LockSet) Release(ctx context.Context) error {
	if s == nil || len(s.locks) == 0 {
		return opErr("release", "", errNoLock)
	}
	return errors.Join(s.releaseAll(ctx)...)
}

// releaseAll is release observed by the hooks as one OpReleaseAll.
func (s *LockSet) releaseAll(ctx context.Context) []error {
	ctx, begin := s.hooks.start(ctx, observe.OpReleaseAll, ""), time.Now()
	errs := s.release(ctx)
	ev := s.event(observe.OpReleaseAll, begin, errs)
	ev.Held = time.Since(s.locks[0].acquired)
	s.hooks.end(ctx, ev)
	return errs
}

// release releases the set's locks and returns the error of each, nil for those released.
func (s *LockSet) release(ctx context.Context) []error {
	errs, ks := make([]error, len(s.locks)), make([]wire.Keys, len(s.locks))
	for i, k := range s.locks {
		ks[i] = k.keys
	}
	var rs []*wire.Release
	var which [][]int // the locks of each of rs
	for _, run := range s.locker.groupKeys(ks) {
		r := &wire.Release{}
		var idx []int
		for _, i := range run {
			k := s.locks[i]
			k.stopLater()
			if k.released.Load() {
				errs[i] = ErrNotHeld
				continue
			}
			r.Keys, r.Values, r.Keep = append(r.Keys, k.keys), append(r.Values, k.value), r.Keep || k.keepRecord()
			idx = append(idx, i)
		}
		if len(idx) > 0 {
			rs, which = append(rs, r), append(which, idx)
		}
	}
	for n, got := range s.locker.release(ctx, rs...) {
		for j, err := range got {
			errs[which[n][j]] = err
		}
	}
	for i, k := range s.locks {
		if errs[i] == nil {
			k.released.Store(true)
			k.validUntil.Store(0)
		}
		errs[i] = opErr("release", k.resource, errs[i])
	}
	return errs
}

// Extend resets the TTL of every lock of the set to ttl, in one round trip per server, as
// [Lock.Extend] does. It returns nil when all were extended, or the others' errors joined, each
// naming its resource (wrapping ErrNotHeld for a lock no longer held, left as it is). A ttl
// outside [MinTTL, MaxTTL] returns an error wrapping [ErrInvalid] and sends nothing.
func (s *LockSet) Extend(ctx context.Context, ttl time.Duration) error {
	if s == nil || len(s.locks) == 0 {
		return opErr("extend", "", errNoLock)
	}
	for _, k := range s.locks {
		k.stopLater()
	}
	if err := validTTL(ttl); err != nil {
		return opErr("extend", "", err)
	}
	return errors.Join(s.extendAll(ctx, ttl, observe.OpExtendAll)...)
}

// extendAll extends the set's locks to a valid ttl in one pipeline, observed as one op.
func (s *LockSet) extendAll(ctx context.Context, ttl time.Duration, op observe.Op) []error {
	ctx, begin := s.hooks.start(ctx, op, ""), time.Now()
	calls := make([]wire.Call, len(s.locks))
	for i, k := range s.locks {
		calls[i] = k.extension(ttl)
	}
	cmds := wire.Pipe(ctx, s.locker.client, calls)
	errs := make([]error, len(s.locks))
	for i, k := range s.locks {
		_, held, err := wire.ParseExtend(cmds[i].Result())
		errs[i] = opErr("extend", k.resource, k.extended(begin, ttl, held, err))
	}
	s.hooks.end(ctx, s.event(op, begin, errs))
	return errs
}

// event returns the hooks' event of op on the whole set, given the error of each lock.
func (s *LockSet) event(op observe.Op, begin time.Time, errs []error) observe.Event {
	e := observe.Event{Op: op, Resources: make([]string, len(s.locks)), Outcome: observe.OutcomeOK, Elapsed: time.Since(begin)}
	for i, k := range s.locks {
		e.Resources[i] = k.resource
	}
	if err := errors.Join(errs...); err != nil {
		e.Outcome, e.Err = outcomeOf(err), err
		e.Resource = s.locks[slices.IndexFunc(errs, func(err error) bool { return err != nil })].resource
	}
	return e
}

// groupKeys splits the indices of ks, in order, into the runs that one script can take: all
// of them on one server, those of one slot on a Cluster, one each on a Ring.
func (l *Locker) groupKeys(ks []wire.Keys) [][]int {
	var runs [][]int
	bySlot := map[uint16]int{}
	for i, k := range ks {
		if !l.topo.OneScript() {
			runs = append(runs, []int{i})
			continue
		}
		s := l.topo.Slot(k.Lock)
		j, ok := bySlot[s]
		if !ok {
			j, bySlot[s], runs = len(runs), len(runs), append(runs, nil)
		}
		runs[j] = append(runs[j], i)
	}
	return runs
}
