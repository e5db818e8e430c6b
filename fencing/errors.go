package fencing

import (
	"errors"
	"io"
	"net"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Sentinel errors. Match them with [errors.Is]: the errors returned by this package wrap them,
// and an error that ends a wait also matches the context's error.
var (
	// ErrNotAcquired means the resource is held by another owner. Acquire returns it, joined
	// with ctx.Err(), when its context ends before the lock could be taken. TryAcquire also
	// returns it when Redis granted the lock but the reply came back after the lease could
	// have run out: the lock is then freed, as it may already belong to someone else.
	ErrNotAcquired = errors.New("fencing: not acquired")

	// ErrNotHeld means this acquisition no longer owns the lock: it was released, it expired,
	// or another owner has taken it since. Release and Extend return it and change nothing;
	// Do cancels its work's context with it as the cause.
	ErrNotHeld = errors.New("fencing: not held")

	// ErrInvalid means an argument or option is unusable: an empty or oversized resource name,
	// a TTL out of range, a nil client, a prefix containing '{' or '}'. Nothing was sent to Redis.
	ErrInvalid = errors.New("fencing: invalid argument")

	// ErrClosed means the Locker was closed; Release and Extend still work on its locks.
	ErrClosed = errors.New("fencing: locker closed")

	// ErrNotReplicated means fewer replicas than required by [WithReplicas] acknowledged an
	// acquisition in time. The lock was released before the error was returned.
	ErrNotReplicated = errors.New("fencing: acquisition not replicated")

	// ErrUnsafeServer means a Redis server's settings let it lose a resource's fence counter
	// and lock keys at any time: its maxmemory-policy is one of the allkeys-* policies, which
	// may evict keys that have no TTL once memory is full. [Locker.CheckServer] returns it.
	ErrUnsafeServer = errors.New("fencing: unsafe server settings")

	// ErrNotLeader means an [Elector] does not lead now: it is not running, it is campaigning
	// while another process leads, its term was lost, or its lease has run out by the local
	// clock. [Elector.IsLeader] returns it; a scheduler that gets it skips the run.
	ErrNotLeader = errors.New("fencing: not leader")
)

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

// passing reports whether err can pass by itself: the connection failed or timed out, or the
// server cannot serve the call yet (loading its data, a replica promoted or a primary demoted,
// the cluster or the primary down, a slot moving, another script running, too many clients).
func passing(err error) bool {
	var ne net.Error
	_, moved := redis.IsMovedError(err)
	_, ask := redis.IsAskError(err)
	return errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, redis.ErrPoolTimeout) || redis.IsLoadingError(err) || redis.IsReadOnlyError(err) ||
		redis.IsClusterDownError(err) || redis.IsTryAgainError(err) || redis.IsMasterDownError(err) ||
		redis.IsMaxClientsError(err) || redis.HasErrorPrefix(err, "BUSY ") || moved || ask
}
