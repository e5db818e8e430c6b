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
// acquisition holds it, writes memo. It returns nil when both were done; one wrapping
// [ErrNotHeld], having written nothing, when the lock was lost; one wrapping [ErrInvalid],
// sending nothing, for an invalid memo. Other errors come from Redis: the lock then stays held
// until its lease runs out, and a first run whose reply was lost may have written the memo.
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

// LeaveMemo, called with the context of [Locker.Do]'s function (or of a term of [Locker.Lead]),
// makes the release at the end write memo in the same step, only while the lock is still held
// (Do returns an error matching [ErrNotHeld] when not); a later call replaces it. It returns an
// error wrapping [ErrInvalid] for an invalid memo, or a context without Do's one lock (DoAll's).
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

// UnlessMemo makes [Locker.TryAcquire], [Locker.Acquire] or [Locker.Do] look for the resource's
// memo name first, in the same round trip (see [Memo]): when it exists, nothing is taken, and the
// call returns a [*MemoError] (matching [ErrNotAcquired]) that holds its value. A call granted the
// lock from the queue was not checked, and should read the memo ([Locker.ReadMemo]) before the
// work. An invalid name, a set of resources or Lead is an error wrapping [ErrInvalid].
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
