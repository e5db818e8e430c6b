package fencing

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/internal/topology"
	"github.com/fencekit/fencekit/internal/wire"
)

// Waiters returns the number of waiters queued in l, for tests.
func Waiters(l *Locker) int {
	n, _, _ := l.room.Counts()
	return n
}

// ID returns l's id in the Redis queues, for tests.
func ID(l *Locker) string { return l.room.ID() }

// Queued returns the number of l's waiters whose element is in a Redis queue, for tests.
func Queued(l *Locker) int {
	_, n, _ := l.room.Counts()
	return n
}

// Granted returns the number of l's waiters to which a grant was delivered, for tests.
func Granted(l *Locker) int {
	_, _, n := l.room.Counts()
	return n
}

// LoadScripts loads the acquire and poll scripts into c's server and returns their SHA1
// digests, for tests that spot their EVALSHA.
func LoadScripts(ctx context.Context, c redis.Scripter) (acquire, poll string, err error) {
	if err := c.ScriptLoad(ctx, wire.Acquire.Source()).Err(); err != nil {
		return "", "", err
	}
	return wire.Acquire.Hash(), wire.Poll.Hash(), c.ScriptLoad(ctx, wire.Poll.Source()).Err()
}

// Listening reports whether l's subscription for resource's grants is confirmed, for tests.
func Listening(l *Locker, resource string) bool {
	return l.room.Listening(wire.For(l.cfg.prefix, resource))
}

// SetOutageWait sets how long l's waiters go on through Redis errors that can pass, for tests;
// call it before l is used.
func SetOutageWait(l *Locker, d time.Duration) { l.room.SetOutage(d) }

// ExtendSHA returns the SHA1 digest of the extend script, for tests that spot its EVALSHA.
func ExtendSHA() string { return wire.Extend.Hash() }

// Pending reports whether k's deferred extension of a grant's short lease is pending, for
// tests.
func Pending(k *Lock) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.later != nil
}

// Slot returns the Redis Cluster hash slot of key, for tests.
func Slot(key string) uint16 { return topology.Slot(key) }

// AcquireAllSHA and ReleaseSHA return the SHA1 digests of the set acquire script and of the
// release script, for tests that spot their EVALSHA.
func AcquireAllSHA() string { return wire.AcquireAll.Hash() }
func ReleaseSHA() string    { return wire.Release.Hash() }
