package fencing

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// Waiters returns the number of waiters queued in l, for tests.
func Waiters(l *Locker) int {
	return countWaiters(l, func(*waiter) bool { return true })
}

// countWaiters returns the number of l's waiters for which f is true.
func countWaiters(l *Locker, f func(*waiter) bool) int {
	l.waits.mu.Lock()
	defer l.waits.mu.Unlock()
	n := 0
	for _, ln := range l.waits.lines {
		ln.mu.Lock()
		for _, w := range ln.waiters {
			if f(w) {
				n++
			}
		}
		ln.mu.Unlock()
	}
	return n
}

// ID returns l's id in the Redis queues, for tests.
func ID(l *Locker) string { return l.waits.id }

// Queued returns the number of l's waiters whose element is in a Redis queue, for tests.
func Queued(l *Locker) int { return countWaiters(l, queued) }

// Granted returns the number of l's waiters to which a grant was delivered, for tests.
func Granted(l *Locker) int {
	return countWaiters(l, func(w *waiter) bool { return w.got })
}

// LoadScripts loads the acquire and poll scripts into c's server and returns their SHA1
// digests, for tests that spot their EVALSHA.
func LoadScripts(ctx context.Context, c redis.Scripter) (acquire, poll string, err error) {
	if err := c.ScriptLoad(ctx, acquireScript.src).Err(); err != nil {
		return "", "", err
	}
	return acquireScript.hash(), pollScript.hash(), c.ScriptLoad(ctx, pollScript.src).Err()
}

// Listening reports whether l's subscription for resource's grants is confirmed, for tests.
func Listening(l *Locker, resource string) bool {
	return l.waits.listening(resourceKeys(l.cfg.prefix, resource).channel)
}

// SetOutageWait sets how long l's waiters go on through Redis errors that can pass, for tests;
// call it before l is used.
func SetOutageWait(l *Locker, d time.Duration) { l.waits.outage = d }

// ExtendSHA returns the SHA1 digest of the extend script, for tests that spot its EVALSHA.
func ExtendSHA() string { return extendScript.hash() }

// Pending reports whether k's deferred extension of a grant's short lease is pending, for
// tests.
func Pending(k *Lock) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.later != nil
}
