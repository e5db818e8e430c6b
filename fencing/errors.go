package fencing

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/fencekit/fencekit/fencing/internal/room"
)

// Sentinel errors. Match them with [errors.Is]: the errors returned by this package wrap them,
// and an error that ends a wait also matches the context's error.
var (
	// ErrNotAcquired means the resource is busy: held by others, or waiters are queued ahead.
	// The error is then a [*BusyError], which says more. Acquire returns it, joined with
	// ctx.Err(), when its context ends before the lock could be taken. TryAcquire also returns
	// it when Redis granted the lock but the reply came back after the lease could have run
	// out: the lock is then freed, as it may already belong to someone else.
	ErrNotAcquired = errors.New("fencing: not acquired")

	// ErrNotHeld means this acquisition no longer owns the lock: it was released, it expired,
	// or another owner has taken it since. Release and Extend return it and change nothing;
	// Do cancels its work's context with it as the cause.
	ErrNotHeld = errors.New("fencing: not held")

	// ErrInvalid means an argument or option is unusable: an empty or oversized resource name,
	// a TTL out of range, a nil client, a prefix containing '{' or '}', options that do not go
	// together. Nothing was sent to Redis, except for a call of a kind that the resource's live
	// holders cannot admit (see [WithLimit], [Shared]), which changed nothing.
	ErrInvalid = errors.New("fencing: invalid argument")

	// ErrClosed means the Locker was closed; Release and Extend still work on its locks.
	ErrClosed = errors.New("fencing: locker closed")

	// ErrNotReplicated means fewer replicas than required by [WithReplicas] acknowledged an
	// acquisition in time. The lock was released before the error was returned.
	ErrNotReplicated = errors.New("fencing: acquisition not replicated")

	// ErrLayout means a shared or limited resource's lock is a hash in the key layout of an
	// earlier fencekit version (layout 1: fields limit, until and <owner>:<token>): processes
	// of that version hold it, during a rolling deploy. The call changed nothing and took nothing; the resource is usable again
	// once those holders have released it or their leases have ended. See docs/design.md,
	// "Rolling deploys".
	ErrLayout = room.ErrLayout
)

// A BusyError is the error of an acquisition that found its resource busy: held by others (an
// exclusive holder, shared holders for an exclusive call, every slot of a limit) or waiters
// queued ahead of it. It matches [ErrNotAcquired] with [errors.Is]; use [errors.As] to read
// it. TryAcquire and the set calls return it as it is; Acquire and Do when [WithMaxWait] runs
// out, and joined with the context's error when the context ends the wait (and with the last
// Redis error, when the waiter's checks were failing).
type BusyError struct {
	// Resource is the busy resource; for a set of resources, the one waited for.
	Resource string
	// RetryAfter is how long the holders' lease had left when Redis last answered: the
	// exclusive holder's, shared holders' latest, a limit's earliest. 0 when unknown.
	RetryAfter time.Duration
	// Waited is how long the call waited in the resource's queue; 0 for a single attempt.
	Waited time.Duration
	// Ahead is how many waiters were ahead in the queue when the wait ended, or -1 when
	// unknown (and for a single attempt).
	Ahead int

	late bool // Redis granted the lock, but the reply came after the lease could have run out
}

func (e *BusyError) Error() string {
	if e == nil {
		return "fencing: not acquired"
	}
	if e.late {
		return fmt.Sprintf("fencing: not acquired: %q: Redis replied after the lease could have run out", e.Resource)
	}
	msg := fmt.Sprintf("fencing: not acquired: %q is held by another owner", e.Resource)
	if e.Waited <= 0 {
		return msg
	}
	msg += fmt.Sprintf(" after waiting %v", e.Waited.Round(time.Millisecond))
	switch {
	case e.Ahead == 0:
		msg += ", first in the queue"
	case e.Ahead == 1:
		msg += ", 1 waiter ahead"
	case e.Ahead > 1:
		msg += fmt.Sprintf(", %d waiters ahead", e.Ahead)
	}
	return msg
}

// Is reports whether target is ErrNotAcquired.
func (e *BusyError) Is(target error) bool { return target == ErrNotAcquired }

// busyWith returns the BusyError of a single attempt on resource, whose holders had left
// milliseconds of lease.
func busyWith(resource string, left int64) *BusyError {
	return &BusyError{Resource: resource, RetryAfter: max(time.Duration(left)*time.Millisecond, 0), Ahead: -1}
}

// RetryAfter reports how long the holders' lease had left when an acquisition failed because
// the resource was busy: [BusyError.RetryAfter]. The second result is false when err carries
// no such figure.
func RetryAfter(err error) (time.Duration, bool) {
	var b *BusyError
	if errors.As(err, &b) && b.RetryAfter > 0 {
		return b.RetryAfter, true
	}
	return 0, false
}

// BusyResource returns the resource that was busy when an acquisition failed because of it:
// [BusyError.Resource], for the set calls the one waited for. The second result is false when
// err carries none.
func BusyResource(err error) (string, bool) {
	var b *BusyError
	if errors.As(err, &b) {
		return b.Resource, true
	}
	return "", false
}

// opError is an operation's error: its text has one "fencing: " prefix and one line, such as
// `fencing: release "r": not held`, while errors.Is and errors.As still see err.
type opError struct {
	op, resource string
	err          error
}

func (e *opError) Error() string {
	msg := strings.TrimPrefix(e.err.Error(), "fencing: ")
	if e.resource == "" {
		return "fencing: " + e.op + ": " + msg
	}
	return "fencing: " + e.op + " " + strconv.Quote(e.resource) + ": " + msg
}

func (e *opError) Unwrap() error { return e.err }

// opErr wraps err, unless it is nil, as op's error on resource ("" for none).
func opErr(op, resource string, err error) error {
	if err == nil {
		return nil
	}
	return &opError{op: op, resource: resource, err: err}
}

// both is two errors as one: errors.Is and errors.As match either, and the text is one line,
// such as `fencing: not acquired: "r" is held by another owner after waiting 20ms, first in
// the queue: context deadline exceeded`.
type both struct{ first, second error }

func (e *both) Error() string {
	first, second := e.first.Error(), e.second.Error()
	if strings.HasPrefix(first, "fencing: ") {
		second = strings.TrimPrefix(second, "fencing: ")
	}
	return first + ": " + second
}

func (e *both) Unwrap() []error { return []error{e.first, e.second} }

// join returns first and second as one error; either may be nil.
func join(first, second error) error {
	switch {
	case first == nil:
		return second
	case second == nil:
		return first
	}
	return &both{first, second}
}

// list is errors.Join on one line: the texts are separated by "; ".
type list []error

func (l list) Error() string {
	texts := make([]string, len(l))
	for i, err := range l {
		texts[i] = err.Error()
	}
	return strings.Join(texts, "; ")
}

func (l list) Unwrap() []error { return l }

// joinAll returns errs as one error, nil when there are none.
func joinAll(errs []error) error {
	switch len(errs) {
	case 0:
		return nil
	case 1:
		return errs[0]
	}
	return list(errs)
}
