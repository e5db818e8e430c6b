package fencing

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/fencekit/fencekit/fencing/observe"

	"github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/fencing/internal/room"
	"github.com/fencekit/fencekit/internal/wire"
)

// Acquisition: one attempt is one acquire script (attempt); a wait is the room's
// (room.Wait, see wait.go), which returns a grant that take turns into a Lock.

// TryAcquire makes one attempt to take resource: exclusively, or with [Shared] beside other
// shared holders, or with [WithLimit] one of its slots. It returns the lock and its fencing
// token, or a [*BusyError] (matching [ErrNotAcquired]) when the resource is busy: held in a
// way this call cannot join, or waiters are queued for it (the error says how long the
// holders' lease had left), or when the reply came back too late to trust the lease. Any other
// error (Redis unreachable, invalid input wrapping [ErrInvalid], a context already done) means
// nothing is held. A call refused before it reaches Redis (invalid input, a closed Locker, a
// context already done) sends nothing, and hooks still observe it. Options override the
// Locker's settings for this call, such as [WithTTL].
func (l *Locker) TryAcquire(ctx context.Context, resource string, opts ...CallOption) (*Lock, error) {
	if l == nil {
		return nil, opErr("acquire", resource, errNilLocker)
	}
	cfg := l.cfg.with(opts)
	ctx = cfg.hooks.start(ctx, observe.OpTryAcquire, resource)
	begin := time.Now()
	var lock *Lock
	var busy *BusyError
	attempts := 0
	err := l.check(ctx, cfg, resource)
	if err == nil {
		attempts = 1
		var locks []*Lock
		var r attemptReply
		locks, r, err = l.attempt(ctx, cfg, []member{{name: resource, keys: wire.For(cfg.prefix, resource)}}, "", "")
		switch {
		case err != nil:
			err = opErr("acquire", resource, err)
		case len(locks) > 0:
			lock = locks[0]
		default:
			busy, err = r.busy, r.busy
		}
	}
	ev := observe.Event{Op: observe.OpTryAcquire, Resource: resource, Attempts: attempts, Elapsed: time.Since(begin)}
	switch {
	case busy != nil:
		ev.Outcome = observe.OutcomeBusy
	case err != nil:
		ev.Outcome, ev.Err = outcomeOf(err), err
	default:
		ev.Outcome, ev.Token, ev.ClockBehind = observe.OutcomeAcquired, lock.token, lock.behind
	}
	cfg.hooks.end(ctx, ev)
	return lock, err
}

// Acquire takes resource as TryAcquire does, waiting while it is busy. Waiting is first come,
// first served across every process that locks the resource, in a queue kept in Redis: while
// waiters are queued, neither TryAcquire nor Acquire takes the resource ahead of them, even
// when it is free, and a shared request waits behind an exclusive one queued before it. A
// release hands the resource to the longest-waiting waiters in the same round trip and wakes
// only their processes; a holder whose lease runs out is replaced about a round trip after
// its end. The Lock returned may start with a shorter lease than the TTL and is extended to
// it in the background, unless it is released or extended first (see docs/waiting.md).
//
// When ctx ends first, Acquire returns an error that matches both [ErrNotAcquired] and
// ctx.Err() under errors.Is, and holds nothing: the waiter leaves the queue, and a grant to it
// meanwhile goes to the next waiter. Its [BusyError.RetryAfter] is the holders' remaining
// lease as Redis counts it when the waiter leaves. A Redis error on the way into the queue
// ends the call at once and is returned as it is (it does not match ErrNotAcquired). Once
// queued, a waiter keeps its place through errors that can pass by themselves (a lost
// connection, a timeout, LOADING, READONLY, CLUSTERDOWN, MASTERDOWN, TRYAGAIN, BUSY: a
// restart or a failover) for up to 30s of them in a row; the error that ends the wait then
// also matches the last of them. Any other error ends it at once.
func (l *Locker) Acquire(ctx context.Context, resource string, opts ...CallOption) (*Lock, error) {
	if l == nil {
		return nil, opErr("acquire", resource, errNilLocker)
	}
	return l.acquire(ctx, l.cfg.with(opts), resource)
}

// acquire is Acquire with the call's settings resolved.
func (l *Locker) acquire(ctx context.Context, cfg *config, resource string) (*Lock, error) {
	ctx = cfg.hooks.start(ctx, observe.OpAcquire, resource)
	begin := time.Now()
	var lock *Lock
	attempts := 0
	err := l.check(ctx, cfg, resource)
	if err == nil {
		lock, attempts, err = l.wait(ctx, cfg, resource)
	}
	ev := observe.Event{Op: observe.OpAcquire, Resource: resource, Attempts: attempts, Elapsed: time.Since(begin)}
	if err != nil {
		ev.Outcome, ev.Err = outcomeOf(err), err
	} else {
		ev.Outcome, ev.Token, ev.ClockBehind = observe.OutcomeAcquired, lock.token, lock.behind
	}
	cfg.hooks.end(ctx, ev)
	return lock, err
}

// member is one resource of an acquisition.
type member struct {
	name string
	keys wire.Keys
	slot uint16 // its Cluster hash slot; 0 unless the client is a Cluster's
}

// attemptReply is what an attempt learnt when it did not take every resource.
type attemptReply struct {
	busy   *BusyError // the first resource not taken: busy, with the holders' remaining lease
	queued bool       // the waiter's element joined that resource's queue
	held   string     // queued: the exclusive holder's lock value the script saw, "" when none
	left   time.Duration
}

// attempt runs one acquire script on g: the acquire script on one resource, whose waiter's
// element elem (when not "") queues when it is busy, with entry for the Locker's waiter key;
// or the set's on several resources that one script can take (see groups). It returns the
// locks taken, in g's order, and when not all, what it learnt of the next one. On an error
// nothing is held, but for a refusal of a set's script (holders of a limit, a memo), whose
// locks already taken it returns for the caller to free: a script that may have run without
// its reply reaching us is undone by releasing whatever it took.
func (l *Locker) attempt(ctx context.Context, cfg *config, g []member, elem, entry string) ([]*Lock, attemptReply, error) {
	owner, err := newOwner()
	if err != nil {
		return nil, attemptReply{}, err
	}
	owner = wire.Labeled(owner, cfg.label)
	ms := millis(cfg.ttl)
	sent := time.Now()
	var res any
	if len(g) == 1 {
		res, err = l.acquireOne(ctx, cfg, g[0].keys, owner, ms, elem, entry)
	} else {
		args := []any{owner, ms}
		if cfg.timeFloor {
			args = append(args, cfg.floorArg(), cfg.expiryArg())
		}
		res, err = wire.AcquireAll.Run(ctx, l.client, wire.Declare(l.client, memberKeys(g), ""), args...).Result()
	}
	if err != nil {
		// Unless Redis answered with an error (the script failed), it may have run and left
		// us holding locks: free them rather than strand them until their TTL.
		var reply redis.Error
		if !errors.As(err, &reply) || errors.Is(err, ErrNotReplicated) {
			l.releaseOwner(ctx, cfg, g, owner)
		}
		if ctx.Err() != nil {
			return nil, attemptReply{}, join(ErrNotAcquired, ctx.Err())
		}
		return nil, attemptReply{}, err
	}
	var tokens []int64
	var behind int64
	var r attemptReply
	var refused error // the script refused the call and wrote nothing for it
	if len(g) == 1 {
		a, perr := wire.ParseAcquire(res)
		err = perr
		switch {
		case err != nil:
		case a.Code == wire.Taken:
			tokens, behind = []int64{a.Token}, a.Behind
		case a.Code == wire.Busy:
			r.busy = busyWith(g[0].name, a.Left)
		case a.Code == wire.Queued:
			r = attemptReply{busy: busyWith(g[0].name, a.Left), queued: true, held: a.Held, left: time.Duration(a.Left) * time.Millisecond}
		default:
			refused = refusal(g[0].name, a.Code, a.Held, cfg)
		}
	} else {
		var s wire.SetReply
		s, err = wire.ParseSet(res, len(g))
		switch {
		case err != nil:
		case s.Code == wire.Taken:
			tokens, behind = s.Tokens, s.Behind
		case s.Code == wire.Busy:
			tokens, r.busy = s.Tokens, busyWith(g[len(s.Tokens)].name, s.Left)
		default:
			tokens, refused = s.Tokens, refusal(g[len(s.Tokens)].name, s.Code, s.Kind, cfg)
		}
	}
	if err != nil {
		l.releaseOwner(ctx, cfg, g, owner)
		return nil, attemptReply{}, err
	}
	locks := make([]*Lock, len(tokens))
	for i, token := range tokens {
		locks[i] = &Lock{
			locker: l, hooks: cfg.hooks, resource: g[i].name, keys: g[i].keys, mode: cfg.mode,
			value: owner + ":" + strconv.FormatInt(token, 10), token: token,
			acquired: sent, behind: time.Duration(behind) * time.Microsecond,
		}
		locks[i].setValidUntil(sent, time.Duration(ms)*time.Millisecond)
	}
	switch {
	case refused != nil:
		return locks, attemptReply{}, refused // the caller frees the locks taken
	case len(locks) == 0:
		return nil, r, nil
	case ctx.Err() != nil:
		l.releaseOwner(ctx, cfg, g, owner)
		return nil, attemptReply{}, join(ErrNotAcquired, ctx.Err())
	case !locks[0].valid():
		// The reply came back after the leases could have run out: the locks may already
		// belong to someone else. Count it as busy; a wait tries again.
		l.releaseOwner(ctx, cfg, g, owner)
		return nil, attemptReply{busy: &BusyError{Resource: g[0].name, Ahead: -1, late: true}}, nil
	}
	return locks, r, nil
}

// refusal is the error of an acquire script that refused a call on resource and wrote nothing
// for it: holders of a kind it cannot join (the kind in detail), a lock of the earlier layout,
// or a memo (its value in detail).
func refusal(resource string, code int64, detail string, cfg *config) error {
	switch code {
	case wire.Mismatch:
		have, _ := wire.ParseKind(detail)
		return opErr("acquire", resource, invalidf("the resource's live holders are %s, this call %s; a new kind takes effect once the resource is idle", kindName(have), kindName(cfg.mode)))
	case wire.Layout:
		return opErr("acquire", resource, room.ErrLayout)
	case wire.Memoed:
		return &MemoError{Resource: resource, Name: cfg.memo, Value: detail}
	}
	return fmt.Errorf("unexpected reply code %d", code)
}

// kindName names a kind in errors: "exclusive (limit 1)", "shared" or "limit n".
func kindName(k wire.Kind) string {
	switch {
	case k.Shared:
		return "shared"
	case k.Limit > 1:
		return "limit " + strconv.Itoa(k.Limit)
	}
	return "exclusive (limit 1)"
}

// acquireOne sends the acquire script for one resource (see its header for the arguments:
// those with their defaults are left out), followed by WAIT on the same connection when
// replicas must acknowledge it.
func (l *Locker) acquireOne(ctx context.Context, cfg *config, k wire.Keys, owner string, ms int64, elem, entry string) (any, error) {
	args := acquireArgs(cfg, owner, ms, l.topo.Publish(), elem, entry)
	if cfg.replicas > 0 {
		return l.replicated(ctx, cfg, wire.Declare(l.client, []wire.Keys{k}, cfg.memo), wire.Acquire, args, func(res any) bool {
			a, err := wire.ParseAcquire(res)
			return err == nil && a.Code == wire.Taken
		})
	}
	return wire.Acquire.RunOn(ctx, l.client, k, cfg.memo, args...).Result()
}

// acquireArgs returns the acquire script's arguments, those with their defaults at the end
// left out: owner, lease, kind, element, entry, publish, floor, expiry, memo.
func acquireArgs(cfg *config, owner string, ms int64, publish, elem, entry string) []any {
	all := [9]any{owner, ms, cfg.mode.Arg(), elem, entry, publish, cfg.floorArg(), cfg.expiryArg(), cfg.memo}
	n := 2
	switch {
	case cfg.memo != "":
		n = 9
	case cfg.expiry > 0:
		n = 8
	case cfg.timeFloor:
		n = 7
	case publish != "P":
		n = 6
	case elem != "":
		n = 5
	case !cfg.mode.Exclusive():
		n = 3
	}
	return append(make([]any, 0, n), all[:n]...)
}

// replicated runs a script with EVAL on the primary that owns keys[0], followed by WAIT on
// the same connection, and fails with ErrNotReplicated when the script's reply says it wrote
// (wrote) and fewer replicas than cfg.replicas acknowledged it.
func (l *Locker) replicated(ctx context.Context, cfg *config, keys []string, s *wire.Script, args []any, wrote func(any) bool) (any, error) {
	res, acks, err := l.pipeWait(ctx, cfg, keys, s, args)
	if _, moved := redis.IsMovedError(err); moved {
		// The slot moved (a failover, resharding): the script did not run. go-redis learns
		// of it only from its own commands, not from a reply inside this pipeline, so reload
		// the slot map and send the pipeline to the new owner.
		l.topo.Refresh(ctx)
		res, acks, err = l.pipeWait(ctx, cfg, keys, s, args)
	}
	if err != nil {
		return nil, err
	}
	if wrote(res) {
		n, err := acks.Result()
		if err != nil {
			return nil, fmt.Errorf("%w: WAIT: %w", ErrNotReplicated, err)
		}
		if n < int64(cfg.replicas) {
			return nil, fmt.Errorf("%w: %d of %d replicas acknowledged within %v", ErrNotReplicated, n, cfg.replicas, cfg.replicaTO)
		}
	}
	return res, nil
}

// pipeWait sends a script with EVAL and WAIT in one pipeline to the primary that owns keys[0].
func (l *Locker) pipeWait(ctx context.Context, cfg *config, keys []string, s *wire.Script, args []any) (any, *redis.IntCmd, error) {
	node, err := l.topo.Primary(ctx, keys[0])
	if err != nil {
		return nil, nil, err
	}
	// EVAL, not EVALSHA: a NOSCRIPT reply inside the pipeline would cost a second WAIT.
	pipe := node.Pipeline()
	cmd := pipe.Eval(ctx, s.Source(), keys, args...)
	acks := redis.NewIntCmd(ctx, "wait", cfg.replicas, cfg.replicaTO.Milliseconds())
	_ = pipe.Process(ctx, acks)
	_, _ = pipe.Exec(ctx)
	res, err := cmd.Result()
	return res, acks, err
}

// releaseOwner frees whatever the acquisition of owner holds of g, with a fresh, short
// context: the caller's may be done. Errors are ignored; the leases run out by themselves if
// this fails.
func (l *Locker) releaseOwner(ctx context.Context, cfg *config, g []member, owner string) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	ks := make([]wire.Keys, len(g))
	values := make([]string, len(g))
	for i, m := range g {
		ks[i], values[i] = m.keys, owner+":"
	}
	l.release(rctx, ks, values, cfg.mode, false)
}

// memberKeys returns the keys of g's resources.
func memberKeys(g []member) []wire.Keys {
	ks := make([]wire.Keys, len(g))
	for i, m := range g {
		ks[i] = m.keys
	}
	return ks
}

// newOwner returns 16 random bytes as unpadded base64url: 22 characters, never ':' or '.'.
func newOwner() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("fencing: owner value: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b[:]), nil
}
