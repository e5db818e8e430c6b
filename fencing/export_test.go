package fencing

// Waiters returns the number of waiters queued in l, for tests.
func Waiters(l *Locker) int {
	l.hub.mu.Lock()
	defer l.hub.mu.Unlock()
	n := 0
	for _, ln := range l.hub.lines {
		n += len(ln.waiters)
	}
	return n
}

// ID returns l's id in the Redis queues, for tests.
func ID(l *Locker) string { return l.hub.id }
