package fencing

import "errors"

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
)
