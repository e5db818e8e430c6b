package room

import (
	"context"
	"time"

	"github.com/fencekit/fencekit/internal/wire"
)

// What the tests of package fencing read and do of a room: its waiters' numbers, checks made
// at a step of a test rather than at a moment of the room's own choosing.

// Counts returns the numbers of the room's waiters: all of them, those queued in Redis, and
// those a grant was delivered to.
func (r *Room) Counts() (waiters, queuedN, granted int) {
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

// QueuedFor returns how many of the room's waiters are queued for k's resource.
func (r *Room) QueuedFor(k wire.Keys) int {
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

// CheckNow makes the front waiter of each line check with Redis now, as it does when the
// holders' lease ends, and returns when the checks are done.
func (r *Room) CheckNow(ctx context.Context) error {
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

// Age makes the room behave as a process whose clock moved on with the server's (a test's
// clock jumps as a process's pause does): its next join writes its waiter key again.
func (r *Room) Age() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, ln := range r.lines {
		ln.mu.Lock()
		ln.renewBy = time.Time{}
		ln.mu.Unlock()
	}
}
