package fencing

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/internal/wire"
)

// maxMemoTTL is the longest a Memo may be kept.
const maxMemoTTL = 366 * 24 * time.Hour

// A Memo is a value kept beside a resource's lock, in its keys' Cluster slot: the outcome of
// work done under the lock, written by the release that ends the work, in the same step, only
// while the acquisition still holds the lock ([Lock.ReleaseWith], [LeaveMemo] in [Locker.Do]),
// so that no later acquisition can have run. An acquisition with [UnlessMemo] looks for it
// first and takes nothing when it exists. Together they make work that runs once per resource:
// a request with an idempotency key, a job per order, a webhook per delivery id.
type Memo struct {
	// Name names the memo among the resource's keys, "<prefix>{R}:<Name>": 1 to 64 letters,
	// digits, '-' and '_', other than lock, fence, queue, grant and b64.
	Name string
	// Value is what is kept.
	Value string
	// TTL is how long Redis keeps it, from the release: between [MinTTL] and 366 days.
	TTL time.Duration
	// ExpireCounter makes the same step give the resource's token counter the memo's TTL, unless
	// the counter expires already: for resources locked once or a few times, whose counters would
	// otherwise stay in Redis for ever. It needs the time floor ([WithServerTimeFloor] or
	// [WithCounterExpiry]), with which a counter created again starts above every earlier token.
	ExpireCounter bool
}

// check returns an error wrapping ErrInvalid when m cannot be written by a Locker of cfg.
func (m Memo) check(cfg *config) error {
	switch {
	case !wire.ValidMemo(m.Name):
		return invalidf("memo name %q: want 1 to 64 letters, digits, '-' and '_', not lock, fence, queue, grant or b64", m.Name)
	case m.TTL < MinTTL || m.TTL > maxMemoTTL:
		return invalidf("memo ttl %v out of range [%v, %v]", m.TTL, MinTTL, maxMemoTTL)
	case m.ExpireCounter && !cfg.timeFloor:
		return invalidf("a memo that expires the counter needs WithServerTimeFloor or WithCounterExpiry")
	}
	return nil
}

// ReleaseWith releases the lock as [Lock.Release] does and, in the same step, only while this
// acquisition holds the lock, writes memo. It returns nil when both were done; an error wrapping
// [ErrNotHeld] when the lock was lost, and then nothing was written; an error wrapping
// [ErrInvalid] for an invalid memo, and then nothing was sent (the lock is still held). Other
// errors come from Redis: the lock then stays held until its lease runs out, and the memo may
// have been written (by a first run whose reply was lost).
func (k *Lock) ReleaseWith(ctx context.Context, memo Memo) error {
	if k == nil || k.locker == nil {
		return opErr("release", "", errNoLock)
	}
	if err := memo.check(&k.locker.cfg); err != nil {
		return opErr("release", k.resource, err)
	}
	return k.release(ctx, memo.wire())
}

// wire returns m as the release script writes it.
func (m Memo) wire() wire.Memo {
	w := wire.Memo{Name: m.Name, Value: m.Value, TTL: millis(m.TTL)}
	if m.ExpireCounter {
		w.Counter = w.TTL
	}
	return w
}

// LeaveMemo, called with the context of the function of [Locker.Do] (or of a term of
// [Locker.Lead]), makes the release at the end of Do write memo in the same step, only while
// the lock is still held: Do returns an error matching [ErrNotHeld] when it was not. A later
// call replaces the memo. It returns an error wrapping [ErrInvalid] for an invalid memo, and
// for a context that holds no lock of Do of one resource (such as [Locker.DoAll]'s).
func LeaveMemo(ctx context.Context, memo Memo) error {
	h, _ := ctx.Value(heldKey{}).(*held)
	if h == nil || h.hold == nil || len(h.hold.locks) != 1 {
		return opErr("leave memo", "", invalidf("the context holds no lock of Do of one resource"))
	}
	k := h.hold.locks[0]
	if err := memo.check(&k.locker.cfg); err != nil {
		return opErr("leave memo", k.resource, err)
	}
	w := memo.wire()
	h.hold.memo.Store(&w)
	return nil
}

// UnlessMemo makes an acquisition look for the resource's memo name first (see [Memo]): when it
// exists, nothing is taken, and the call returns a [*MemoError] (matching [ErrNotAcquired])
// that holds its value, in the same round trip. It applies to [Locker.TryAcquire],
// [Locker.Acquire] and [Locker.Do]; a call granted the lock from the queue was not checked,
// and should read the memo itself ([Locker.ReadMemo]) before the work. An invalid name is an
// error wrapping [ErrInvalid] of every call it is given to, as is a set of resources or Lead.
func UnlessMemo(name string) CallOption {
	return callOption(func(c *config) {
		if !wire.ValidMemo(name) && c.err == nil {
			c.err = invalidf("memo name %q: want 1 to 64 letters, digits, '-' and '_', not lock, fence, queue, grant or b64", name)
		}
		c.memo = name
	})
}

// A MemoError is the error of an acquisition with [UnlessMemo] that found the memo: nothing
// was taken. It matches [ErrNotAcquired] with [errors.Is]; read it with [errors.As].
type MemoError struct {
	Resource string // the resource
	Name     string // the memo's name
	Value    string // the memo's value
}

func (e *MemoError) Error() string {
	if e == nil {
		return "not acquired: a memo"
	}
	return fmt.Sprintf("not acquired: the memo %q exists", e.Name)
}

// Is reports whether target is ErrNotAcquired.
func (e *MemoError) Is(target error) bool { return target == ErrNotAcquired }

// ReadMemo returns the value of resource's memo name, and false when there is none. Errors
// wrap [ErrInvalid] for an invalid resource or name (nothing is sent), or come from Redis.
func (l *Locker) ReadMemo(ctx context.Context, resource, name string) (string, bool, error) {
	if err := cmp.Or(l.made(), validResource(resource)); err != nil {
		return "", false, opErr("read memo", resource, err)
	}
	if !wire.ValidMemo(name) {
		return "", false, opErr("read memo", resource, invalidf("memo name %q", name))
	}
	v, err := l.client.Get(ctx, wire.For(l.cfg.prefix, resource).Memo(name)).Result()
	switch {
	case errors.Is(err, redis.Nil):
		return "", false, nil
	case err != nil:
		return "", false, opErr("read memo", resource, err)
	}
	return v, true, nil
}
