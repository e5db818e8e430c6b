package fencing

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/fencing/observe"
	"github.com/fencekit/fencekit/internal/wire"
)

// A Lock is one acquisition of a resource, with its fencing token. Its methods are safe for
// concurrent use; Release and Extend take effect in the order Redis runs them, and once the
// lock is released or lost every later call returns [ErrNotHeld]. The methods of a nil *Lock
// (or a zero Lock) return an error matching ErrNotHeld and [ErrInvalid], so
// `defer lock.Release(ctx)` is safe after a failed acquire.
type Lock struct {
	locker   *Locker
	hooks    hookList
	resource string
	keys     wire.Keys
	kind     wire.Kind
	label    string
	value    string // the holder's value while this acquisition holds the resource: "<owner>:<token>"
	token    int64
	acquired time.Time     // when the acquire script was sent, or the grant taken (monotonic)
	behind   time.Duration // how far the server clock was behind the last token (see observe.Event)

	validUntil atomic.Int64 // local lease deadline: nanoseconds since acquired
	released   atomic.Bool  // a Release returned nil: later ones answer ErrNotHeld locally

	mu       sync.Mutex    // orders the deferred extension with Extend and Release
	later    *time.Timer   // the deferred extension of a grant's short lease (wait.go); nil once done
	laterTTL time.Duration // the lease that extension sets
}

// Token returns the fencing token of this acquisition, higher than every token issued before
// it for the resource: pass it to the store, which must reject writes with a lower one.
func (k *Lock) Token() int64 {
	if k == nil {
		return 0
	}
	return k.token
}

// Resource returns the resource name the lock was taken on.
func (k *Lock) Resource() string {
	if k == nil {
		return ""
	}
	return k.resource
}

// Shared reports whether the acquisition is shared ([Shared]); false for a nil *Lock.
func (k *Lock) Shared() bool {
	return k != nil && k.kind.Shared
}

// Release frees the resource if this acquisition still holds it, handing it in the same round
// trip to the longest-waiting waiters it now admits, with new tokens. It returns an error
// wrapping [ErrNotHeld] and changes nothing when the lease has run out or the resource belongs
// to a newer acquisition. Other errors come from Redis; the resource then stays held until the
// lease runs out. A release retried after a lost reply returns what its first run did.
func (k *Lock) Release(ctx context.Context) error {
	return k.release(ctx, wire.Memo{})
}

// release is Release, with a memo written in the same step (none when m.Name is "").
func (k *Lock) release(ctx context.Context, m wire.Memo) error {
	if k == nil || k.locker == nil {
		return opErr("release", "", errNoLock)
	}
	k.stopLater()
	ctx, begin := k.hooks.start(ctx, observe.OpRelease, k.resource), time.Now()
	err := error(ErrNotHeld) // once released, the record in Redis would answer as to a retry
	if !k.released.Load() {
		err = k.locker.release(ctx, &wire.Release{Keys: []wire.Keys{k.keys}, Values: []string{k.value}, Kind: k.kind, Keep: k.keepRecord(), Memo: m})[0][0]
	}
	if err == nil {
		k.released.Store(true)
		k.validUntil.Store(0)
	}
	err = opErr("release", k.resource, err)
	k.hooks.end(ctx, k.event(observe.OpRelease, begin, err))
	return err
}

// release runs the release scripts rs (each of one script's resources, see groupKeys) in one
// round trip per server and returns each value's error, nil or ErrNotHeld. A lost reply is asked
// again, which the release record answers as the first run went. Grants to its waiters go to them.
func (l *Locker) release(ctx context.Context, rs ...*wire.Release) [][]error {
	calls := make([]wire.Call, len(rs))
	for i, r := range rs {
		r.Publish = l.topo.Publish()
		if l.waits.Load() > 0 && l.room.queuedOn(r.Keys) {
			r.Self = l.room.id
		}
		calls[i] = r.Call(l.client)
	}
	sent, cmds := time.Now(), wire.Pipe(ctx, l.client, calls)
	var lost []wire.Call
	for i, cmd := range cmds {
		if lostReply(ctx, cmd.Err()) {
			lost = append(lost, calls[i])
		}
	}
	if len(lost) > 0 {
		again := wire.Pipe(ctx, l.client, lost)
		for i, cmd := range cmds {
			if lostReply(ctx, cmd.Err()) {
				cmds[i], again = again[0], again[1:]
			}
		}
	}
	errs := make([][]error, len(rs))
	for i, r := range rs {
		res, err := cmds[i].Result()
		replies := []any{res}
		if len(r.Keys) > 1 {
			replies, _ = res.([]any)
		}
		errs[i] = make([]error, len(r.Keys))
		for j := range r.Keys {
			switch {
			case err != nil:
				errs[i][j] = err
			case len(replies) != len(r.Keys):
				errs[i][j] = fmt.Errorf("unexpected reply %v", res)
			default:
				errs[i][j] = l.released(r.Keys[j], r.Values[j], r.Kind, sent, replies[j])
			}
		}
	}
	return errs
}

// released reads the release script's reply for value on k, sent at sent.
func (l *Locker) released(k wire.Keys, value string, kind wire.Kind, sent time.Time, res any) error {
	rep, err := wire.ParseRelease(res)
	switch {
	case err != nil:
		return err
	case rep.Code == wire.NotHeld:
		return ErrNotHeld
	case rep.Code == wire.Layout:
		return ErrLayout
	case l.waits.Load() == 0:
		return nil
	}
	if kind.Exclusive() { // with other holders beside it, a release dates nothing
		l.room.saw(k, sent, value) // later tokens were granted after sent
	}
	for _, g := range rep.Grants {
		l.room.granted(k, grant{elem: g.Element, token: g.Token, after: sent})
	}
	if len(rep.Grants) > 0 {
		// A waiter of this Locker got it: let it run before this goroutine's own work delays the
		// next holder's start (docs/benchmarks.md, "The hand-off's own floor").
		runtime.Gosched()
	}
	return nil
}

// releaseOwner frees what owner's acquisition holds of ks with a fresh context, ignoring errors.
func (l *Locker) releaseOwner(ctx context.Context, cfg *config, ks []wire.Keys, owner string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	var rs []*wire.Release
	for _, run := range l.groupKeys(ks) {
		r := &wire.Release{Kind: cfg.kind}
		for _, i := range run {
			r.Keys, r.Values = append(r.Keys, ks[i]), append(r.Values, owner+":")
		}
		rs = append(rs, r)
	}
	l.release(ctx, rs...)
}

// Extend resets the lease to ttl, counted from now, if this acquisition still holds the
// resource; otherwise (the lease ran out, or a newer acquisition holds it) it returns an error
// wrapping [ErrNotHeld] and changes nothing, never taking a free resource again. A ttl outside
// [MinTTL, MaxTTL] returns an error wrapping [ErrInvalid], sending nothing. A lock from the
// queue keeps its pending extension to the TTL ([Locker.Acquire]) until one takes effect.
func (k *Lock) Extend(ctx context.Context, ttl time.Duration) error {
	if k == nil || k.locker == nil {
		return opErr("extend", "", errNoLock)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	err := k.extend(ctx, ttl, observe.OpExtend)
	if err == nil || errors.Is(err, ErrNotHeld) {
		k.dropLater()
	}
	return err
}

// extend is Extend as op for the hooks, leaving the pending extension as it is.
func (k *Lock) extend(ctx context.Context, ttl time.Duration, op observe.Op) error {
	ctx, begin := k.hooks.start(ctx, op, k.resource), time.Now()
	err := validTTL(ttl)
	if err == nil {
		_, held, rerr := wire.ParseExtend(k.extension(ttl).Run(ctx, k.locker.client).Result())
		err = k.extended(begin, ttl, held, rerr)
	}
	err = opErr("extend", k.resource, err)
	k.hooks.end(ctx, k.event(op, begin, err))
	return err
}

// extension returns the extend script's call for k to ttl.
func (k *Lock) extension(ttl time.Duration) wire.Call {
	return (&wire.Extend{Keys: k.keys, Value: k.value, Kind: k.kind, Lease: millis(ttl)}).Call(k.locker.client)
}

// extended returns an extension's error, given the script's, and records its validity.
func (k *Lock) extended(begin time.Time, ttl time.Duration, held bool, err error) error {
	switch {
	case err != nil:
		return err
	case !held:
		return ErrNotHeld
	}
	k.setValidUntil(begin, time.Duration(millis(ttl))*time.Millisecond)
	return nil
}

// TTL returns the lease left as Redis counts it, or an error wrapping [ErrNotHeld] once lost.
func (k *Lock) TTL(ctx context.Context) (time.Duration, error) {
	if k == nil || k.locker == nil {
		return 0, opErr("ttl", "", errNoLock)
	}
	e := &wire.Extend{Keys: k.keys, Value: k.value, Kind: k.kind}
	left, held, err := e.Run(ctx, k.locker.client)
	if err == nil && !held {
		err = ErrNotHeld
	}
	return left, opErr("ttl", k.resource, err)
}

// event returns the hooks' event of op on k, begun at begin.
func (k *Lock) event(op observe.Op, begin time.Time, err error) observe.Event {
	e := observe.Event{Op: op, Resource: k.resource, Token: k.token, Label: k.label, Outcome: observe.OutcomeOK, Elapsed: time.Since(begin)}
	if err != nil {
		e.Outcome, e.Err = outcomeOf(err), err
	}
	if op == observe.OpRelease {
		e.Held = time.Since(k.acquired)
	}
	return e
}

// setValidUntil records that the lease lasts ttl from sent, less 1% for clock drift.
func (k *Lock) setValidUntil(sent time.Time, ttl time.Duration) {
	k.validUntil.Store(int64(sent.Sub(k.acquired) + ttl - ttl/100))
}

// keepRecord reports whether the lease has less than wire.RecordTTL left (release.lua's keep).
func (k *Lock) keepRecord() bool { return time.Until(k.deadline()) < wire.RecordTTL }

// deadline returns the local end of the lease.
func (k *Lock) deadline() time.Time { return k.acquired.Add(time.Duration(k.validUntil.Load())) }

// valid reports whether the lease has not run out by the local clock.
func (k *Lock) valid() bool { return time.Now().Before(k.deadline()) }

// validResource returns an error wrapping ErrInvalid when resource cannot be locked.
func validResource(resource string) error {
	switch {
	case resource == "":
		return invalidf("empty resource name")
	case len(resource) > MaxResourceLen:
		return invalidf("resource name of %d bytes exceeds %d", len(resource), MaxResourceLen)
	}
	return nil
}

// lostReply reports whether err leaves it unknown whether a script ran, the context lasting.
func lostReply(ctx context.Context, err error) bool {
	var reply redis.Error
	return err != nil && ctx.Err() == nil && !errors.As(err, &reply)
}
