package fencing

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencekit/fencekit/fencing/observe"
	"github.com/fencekit/fencekit/internal/topology"
	"github.com/fencekit/fencekit/internal/wire"
	"github.com/redis/go-redis/v9"
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
	later    *time.Timer   // the deferred extension of a grant's short lease (extendLater); nil once done
	laterTTL time.Duration // the lease that extension sets
}

// TryAcquire makes one attempt to take resource: exclusively, or with [Shared] beside other
// shared holders, or with [WithLimit] one of its slots. It returns the lock and its fencing
// token, or an error holding a [*BusyError] (matching [ErrNotAcquired]) when the resource is
// busy: held in a way this call cannot join, or waiters are queued for it (the error says how
// long the holders' lease had left), or when the reply came back too late to trust the lease.
// Any other error (Redis unreachable, invalid input wrapping [ErrInvalid], a closed Locker, a
// context already done: these three send nothing, and hooks still observe them) means nothing
// is held. Options override the Locker's settings for this call, such as [WithTTL].
func (l *Locker) TryAcquire(ctx context.Context, resource string, opts ...CallOption) (*Lock, error) {
	cfg := l.config(opts)
	ctx, begin := cfg.hooks.start(ctx, observe.OpTryAcquire, resource), time.Now()
	lock, attempts, err := (*Lock)(nil), 0, l.check(ctx, cfg, resource)
	if err == nil {
		var busy *BusyError
		attempts = 1
		lock, busy, err = l.attempt(ctx, cfg, resource, wire.For(cfg.prefix, resource), "", "")
		if busy != nil {
			err = busy
		}
	}
	if err != nil {
		err = opErr("acquire", resource, err)
	}
	cfg.hooks.end(ctx, acquired(observe.OpTryAcquire, resource, attempts, begin, lock, err))
	return lock, err
}

// config returns the settings of a call with opts: the Locker's, or a copy they change.
func (l *Locker) config(opts []CallOption) *config {
	if l == nil {
		c := defaultConfig()
		c.err = invalidf("nil *Locker: make one with fencing.New")
		return &c
	}
	return l.cfg.with(opts)
}

// check validates a call before anything is sent.
func (l *Locker) check(ctx context.Context, cfg *config, resource string) error {
	if err := cmp.Or(l.made(), cfg.err, validResource(resource)); err != nil {
		return err
	}
	if cfg.replicas > 0 && l.topo.Kind == topology.Ring {
		return invalidf("WithReplicas on a Ring: a Ring has no node to wait on")
	}
	if isDone(l.done) {
		return ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%w: %w", ErrNotAcquired, err)
	}
	return nil
}

// attempt runs the acquire script once on resource, whose keys are k, with a waiter's elem and
// entry (see wire.Acquire). It returns the lock taken, or the BusyError of a resource not taken,
// or an error, and then nothing is held (a script that may have run unanswered is undone).
func (l *Locker) attempt(ctx context.Context, cfg *config, resource string, k wire.Keys, elem, entry string) (*Lock, *BusyError, error) {
	lock, r, err := l.try(ctx, cfg, resource, k, elem, entry)
	var busy *BusyError
	switch {
	case errors.As(err, &busy):
		return nil, busy, nil
	case err == nil && lock == nil:
		return nil, busyWith(resource, r.Left), nil
	}
	return lock, nil, err
}

// try is attempt with the script's reply; busy, no lock and no error (late, a BusyError).
func (l *Locker) try(ctx context.Context, cfg *config, resource string, k wire.Keys, elem, entry string) (*Lock, wire.AcquireReply, error) {
	owner, err := newOwner()
	if err != nil {
		return nil, wire.AcquireReply{}, err
	}
	a := &wire.Acquire{
		Keys: k, Owner: wire.Labeled(owner, cfg.label), Lease: millis(cfg.ttl), Kind: cfg.kind, Element: elem,
		Entry: entry, Publish: l.room.publish, Floor: cfg.timeFloor, Expiry: millis(cfg.expiry), Memo: cfg.memo,
	}
	sent, r := time.Now(), wire.AcquireReply{}
	if cfg.replicas > 0 {
		var res any
		res, err = l.replicated(ctx, cfg, a.Call(l.client), func(res any) bool {
			r, err := wire.ParseAcquire(res)
			return err == nil && r.Code == wire.Taken
		})
		if err == nil {
			r, err = wire.ParseAcquire(res)
		}
	} else {
		r, err = a.Run(ctx, l.client)
	}
	undo := func() { l.releaseOwner(ctx, cfg, []wire.Keys{k}, a.Owner) }
	var reply redis.Error
	switch {
	case err != nil && (!errors.As(err, &reply) || errors.Is(err, ErrNotReplicated)):
		undo() // the script may have run
		if ctx.Err() != nil {
			return nil, r, fmt.Errorf("%w: %w", ErrNotAcquired, ctx.Err())
		}
		return nil, r, err
	case err != nil:
		return nil, r, err
	case r.Code == wire.Mismatch:
		have, _ := wire.ParseKind(r.Held)
		return nil, r, invalidf("the resource's live holders are %s, this call %s; a new kind takes effect once the resource is idle", kindName(have), kindName(cfg.kind))
	case r.Code == wire.Layout:
		return nil, r, ErrLayout
	case r.Code == wire.Memoed:
		return nil, r, &MemoError{Resource: resource, Name: cfg.memo, Value: r.Held}
	case r.Code != wire.Taken:
		return nil, r, nil // busy, or queued
	}
	lock := l.newLock(cfg, resource, k, a.Owner, r.Token, sent, millis(cfg.ttl))
	lock.behind = time.Duration(r.Behind) * time.Microsecond
	switch {
	case ctx.Err() != nil:
		undo()
		return nil, r, fmt.Errorf("%w: %w", ErrNotAcquired, ctx.Err())
	case !lock.valid():
		undo() // the reply came after the lease could have run out: busy, a wait tries again
		return nil, r, &BusyError{Resource: resource, Ahead: -1, late: true}
	}
	return lock, r, nil
}

// newLock returns the Lock of owner's acquisition, sent at sent with a lease of ms.
func (l *Locker) newLock(cfg *config, resource string, k wire.Keys, owner string, token int64, sent time.Time, ms int64) *Lock {
	lock := &Lock{locker: l, hooks: cfg.hooks, resource: resource, keys: k, kind: cfg.kind, label: cfg.label,
		value: wire.Value(owner, token), token: token, acquired: sent}
	lock.setValidUntil(sent, time.Duration(ms)*time.Millisecond)
	return lock
}

// newOwner returns 16 random bytes as unpadded base64url: 22 characters, never ':' or '.'.
func newOwner() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("owner value: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// made returns the error of a Locker that New did not make, or whose options were invalid.
func (l *Locker) made() error {
	switch {
	case l == nil:
		return invalidf("nil *Locker: make one with fencing.New")
	case l.room == nil:
		return invalidf("a Locker not made by fencing.New: make one with fencing.New")
	}
	return l.cfg.err
}

// isDone reports whether done is closed.
func isDone(done <-chan struct{}) bool {
	select {
	case <-done:
		return true
	default:
		return false
	}
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
	if err != nil {
		err = opErr("release", k.resource, err)
	}
	k.hooks.end(ctx, k.event(observe.OpRelease, begin, err))
	return err
}

// release runs the release scripts rs (each of one script's resources, see groupKeys) in one
// round trip per server and returns each value's error, nil or ErrNotHeld. A lost reply is asked
// again, which the release record answers as the first run went. Grants to its waiters go to them.
func (l *Locker) release(ctx context.Context, rs ...*wire.Release) [][]error {
	calls := make([]wire.Call, len(rs))
	for i, r := range rs {
		r.Publish = l.room.publish
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

// stopLater cancels extendLater's extension, if any.
func (k *Lock) stopLater() {
	k.mu.Lock()
	k.dropLater()
	k.mu.Unlock()
}

// dropLater cancels extendLater's extension; the caller holds k.mu.
func (k *Lock) dropLater() {
	if k.later != nil {
		k.later.Stop()
		k.later = nil
	}
}

// millis returns d in whole milliseconds, rounded up.
func millis(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}
