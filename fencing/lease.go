package fencing

import (
	"context"
	"errors"
	"time"

	"github.com/fencekit/fencekit/fencing/observe"
	"github.com/fencekit/fencekit/internal/wire"
)

// Token returns this acquisition's fencing token, above all issued before: pass it to the store.
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
	if err != nil {
		err = opErr("extend", k.resource, err)
	}
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

// extendLater extends a grant's shorter lease to ttl a third of the way into it, off the hand-off
// path, retrying while it lasts; an extension, Release and Do's renewals cancel it.
func (k *Lock) extendLater(ttl time.Duration) {
	retry := newBackoff(retryFirst, retryMost)
	run := func() {
		k.mu.Lock()
		defer k.mu.Unlock()
		if k.later == nil {
			return // cancelled meanwhile
		}
		ctx, cancel := context.WithDeadline(context.Background(), k.deadline())
		err := k.extend(ctx, ttl, observe.OpRenew)
		cancel()
		if passing(err) && time.Until(k.deadline()) > retry.next {
			k.later.Reset(retry.step())
			return
		}
		k.later = nil
	}
	k.mu.Lock()
	k.later, k.laterTTL = time.AfterFunc(time.Until(k.deadline())/3, run), ttl
	k.mu.Unlock()
}

// keepUp extends a set's lock to ttl later, unless that is pending or half of ttl is left.
func (k *Lock) keepUp(ttl time.Duration) {
	k.mu.Lock()
	pending := k.later != nil
	k.mu.Unlock()
	if !pending && time.Until(k.deadline()) < ttl/2 {
		k.extendLater(ttl)
	}
}
