package fencing

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/fencekit/fencekit/internal/wire"
)

// Sentinel errors, matched with [errors.Is]. Every error a call returns names the call and its
// resource after the prefix "fencing: ", and then its cause, such as
//
//	fencing: release "orders/42": not held
//	fencing: acquire "orders/42": not acquired: held by another owner after waiting 2s, first in the queue: context deadline exceeded
//
// so the sentinels' own texts carry no prefix, as io/fs's do not.
var (
	// ErrNotAcquired means the resource is busy, held by others or waiters queued ahead, or
	// that Redis granted the lock but the reply came back after the lease could have run out
	// (the lock is then freed): the error holds a [*BusyError]. Acquire returns it, with
	// ctx.Err(), when its context ends before the lock could be taken.
	ErrNotAcquired = errors.New("not acquired")

	// ErrNotHeld means this acquisition no longer owns the lock: it was released, it expired,
	// or another owner has taken it since. Release and Extend return it and change nothing.
	ErrNotHeld = errors.New("not held")

	// ErrInvalid means an argument or option is unusable: an empty or oversized resource name, a
	// TTL out of range, a nil client, a prefix with '{' or '}', options that do not go together.
	// Nothing was sent, but for a kind the live holders refuse ([WithLimit]): nothing changed.
	ErrInvalid = errors.New("invalid argument")

	// ErrClosed means the Locker was closed; Release and Extend still work on its locks.
	ErrClosed = errors.New("locker closed")

	// ErrNotReplicated means too few replicas acknowledged an acquisition in time ([WithReplicas]);
	// the lock was released.
	ErrNotReplicated = errors.New("acquisition not replicated")

	// ErrLayout means a shared or limited resource's lock is in the key layout of a version
	// before v0.1.0 (layout 1), held by its processes during a rolling deploy (see docs/design.md,
	// "Rolling deploys"). The call changed and took nothing; retry once those holders are gone.
	ErrLayout = errors.New("lock in the key layout of an earlier fencekit version, which this one does not change: finish the rolling deploy")
)

// A BusyError is the cause of an acquisition that found its resource busy: held by others (an
// exclusive holder, shared holders for an exclusive call, every slot of a limit) or waiters
// queued ahead of it. It matches [ErrNotAcquired]; read it with [errors.As]. TryAcquire and the
// set calls return it when the resource is busy; Acquire and Do when [WithMaxWait] runs out, or
// the context ends the wait (with its error, and the last Redis error of failing checks).
type BusyError struct {
	// Resource is the busy resource; for a set of resources, the one waited for.
	Resource string
	// RetryAfter is how long the holders' lease had left when Redis last answered: the
	// exclusive holder's, shared holders' latest, a limit's earliest. 0 when unknown.
	RetryAfter time.Duration
	// Waited is how long the call waited in the resource's queue; 0 for a single attempt.
	Waited time.Duration
	// Ahead is how many waiters were ahead when the wait ended; -1 when unknown or not queued.
	Ahead int

	late bool // Redis granted the lock, but the reply came after the lease could have run out
}

// Error says why the resource was busy; the call's error names the resource.
func (e *BusyError) Error() string {
	switch {
	case e == nil:
		return "not acquired"
	case e.late:
		return "not acquired: Redis replied after the lease could have run out"
	case e.Waited <= 0:
		return "not acquired: held by another owner"
	}
	msg := "not acquired: held by another owner after waiting " + e.Waited.Round(time.Millisecond).String()
	switch {
	case e.Ahead == 0:
		msg += ", first in the queue"
	case e.Ahead == 1:
		msg += ", 1 waiter ahead"
	case e.Ahead > 1:
		msg += ", " + strconv.Itoa(e.Ahead) + " waiters ahead"
	}
	return msg
}

// Is reports whether target is ErrNotAcquired.
func (e *BusyError) Is(target error) bool { return target == ErrNotAcquired }

// busyWith returns the BusyError of one attempt on resource; left is the holders' lease in ms.
func busyWith(resource string, left int64) *BusyError {
	return &BusyError{Resource: resource, RetryAfter: max(time.Duration(left)*time.Millisecond, 0), Ahead: -1}
}

// RetryAfter returns how long the holders' lease had left when err's acquisition found the
// resource busy ([BusyError.RetryAfter]), and false when err carries no such figure.
func RetryAfter(err error) (time.Duration, bool) {
	var b *BusyError
	if errors.As(err, &b) && b.RetryAfter > 0 {
		return b.RetryAfter, true
	}
	return 0, false
}

// opError is the error of a call: `fencing: <op> "<resource>": <cause>`, or without resource.
type opError struct {
	op, resource string
	err          error
}

func (e *opError) Error() string {
	if e.resource == "" {
		return "fencing: " + e.op + ": " + e.err.Error()
	}
	return "fencing: " + e.op + " " + strconv.Quote(e.resource) + ": " + e.err.Error()
}

func (e *opError) Unwrap() error { return e.err }

// opErr returns err, unless it is nil, as the error of op on resource ("" for none).
func opErr(op, resource string, err error) error {
	if err == nil {
		return nil
	}
	return &opError{op: op, resource: resource, err: err}
}

// invalidf returns an error wrapping ErrInvalid that says what.
func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
}

// errNoLock is the cause of a call on a nil or zero Lock or LockSet: it holds nothing.
var errNoLock = fmt.Errorf("%w: %w: from no acquisition", ErrNotHeld, ErrInvalid)

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
