package fencing

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/internal/topology"
	"github.com/fencekit/fencekit/internal/wire"
)

// What the tests of package fencing_test read and do of a Locker's room.

// counts returns the numbers of the room's waiters: all of them, those queued in Redis, and
// those a grant was delivered to.
func (r *room) counts() (waiters, queuedN, granted int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, ln := range r.lines {
		ln.mu.Lock()
		for _, w := range ln.waiters {
			waiters++
			if queued(w) {
				queuedN++
			}
			if w.got {
				granted++
			}
		}
		ln.mu.Unlock()
	}
	return waiters, queuedN, granted
}

// Waiters returns the number of waiters in l's room, for tests.
func Waiters(l *Locker) int {
	n, _, _ := l.room.counts()
	return n
}

// ID returns l's id in the Redis queues, for tests.
func ID(l *Locker) string { return l.room.id }

// Queued returns the number of l's waiters whose element is in a Redis queue, for tests.
func Queued(l *Locker) int {
	_, n, _ := l.room.counts()
	return n
}

// Granted returns the number of l's waiters to which a grant was delivered, for tests.
func Granted(l *Locker) int {
	_, _, n := l.room.counts()
	return n
}

// LoadScripts loads the acquire and poll scripts into c's server and returns their SHA1
// digests, for tests that spot their EVALSHA.
func LoadScripts(ctx context.Context, c redis.Scripter) (acquire, poll string, err error) {
	a, p := wire.Scripts["acquire.lua"], wire.Scripts["poll.lua"]
	if err := c.ScriptLoad(ctx, a.Source()).Err(); err != nil {
		return "", "", err
	}
	return a.Hash(), p.Hash(), c.ScriptLoad(ctx, p.Source()).Err()
}

// Listening reports whether l's subscription for resource's grants is confirmed, for tests.
func Listening(l *Locker, resource string) bool {
	return l.room.listening(wire.For(l.cfg.prefix, resource))
}

// SetOutageWait sets how long l's waiters go on through Redis errors that can pass, for tests;
// call it before l is used.
func SetOutageWait(l *Locker, d time.Duration) { l.room.outage = d }

// ExtendSHA and SharedExtendSHA return the SHA1 digests of the extend scripts of an
// exclusive lock and of the other kinds, for tests that spot their EVALSHA (an extension has
// six arguments, a read of the lease five).
func ExtendSHA() string       { return wire.Scripts["extend.lua"].Hash() }
func SharedExtendSHA() string { return wire.Scripts["shared_extend.lua"].Hash() }

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
// exclusive release script, for tests that spot their EVALSHA.
func AcquireAllSHA() string { return wire.Scripts["acquireall.lua"].Hash() }
func ReleaseSHA() string    { return wire.Scripts["release.lua"].Hash() }

// SharedReleaseSHA returns the SHA1 digest of the release script of shared and limited
// holders, for tests that spot its EVALSHA.
func SharedReleaseSHA() string { return wire.Scripts["shared_release.lua"].Hash() }

// checkNow makes the front waiter of each of the room's lines check with Redis now, as it
// does when the holders' lease ends, and returns when the checks are done.
func (r *room) checkNow(ctx context.Context) error {
	r.mu.Lock()
	lines := make([]*line, 0, len(r.lines))
	for _, ln := range r.lines {
		lines = append(lines, ln)
	}
	r.mu.Unlock()
	for _, ln := range lines {
		ln.mu.Lock()
		front := ln.front()
		waiting := front != nil && queued(front)
		ln.mu.Unlock()
		if waiting {
			if err := r.check(ctx, ln); err != nil {
				return err
			}
		}
	}
	return nil
}

// age makes the room behave as a process whose clock moved on with the server's (a test's
// clock jumps as a process's pause does): its next join writes its waiter key again.
func (r *room) age() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, ln := range r.lines {
		ln.mu.Lock()
		ln.renewBy = time.Time{}
		ln.mu.Unlock()
	}
}

// queuedFor returns how many of the room's waiters are queued for k's resource.
func (r *room) queuedFor(k wire.Keys) int {
	ln := r.line(k.Channel)
	if ln == nil {
		return 0
	}
	ln.mu.Lock()
	defer ln.mu.Unlock()
	n := 0
	for _, w := range ln.waiters {
		if queued(w) {
			n++
		}
	}
	return n
}
