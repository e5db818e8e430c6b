package fencing

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/fencing/observe"
	"github.com/fencekit/fencekit/internal/topology"
	"github.com/fencekit/fencekit/internal/wire"
)

// Taking a lock: one attempt is one acquire script, as TryAcquire's and Acquire's (wait.go).

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
	err = opErr("acquire", resource, err)
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
	if err := cmp.Or(l.made(), cfg.err, cfg.conflict(), validResource(resource)); err != nil {
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
		Entry: entry, Publish: l.topo.Publish(), Floor: cfg.timeFloor, Expiry: millis(cfg.expiry), Memo: cfg.memo,
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

// newOwner returns 16 random bytes as unpadded base64url: 22 characters, never ':' or '.'.
func newOwner() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("owner value: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b[:]), nil
}
