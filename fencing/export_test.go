package fencing

// Waiters returns the number of waiters queued in l, for tests.
func Waiters(l *Locker) int {
	l.waits.mu.Lock()
	defer l.waits.mu.Unlock()
	n := 0
	for _, ln := range l.waits.lines {
		n += len(ln.waiters)
	}
	return n
}

// ID returns l's id in the Redis queues, for tests.
func ID(l *Locker) string { return l.waits.id }

// Queued returns the number of l's waiters whose element is in a Redis queue, for tests.
func Queued(l *Locker) int {
	l.waits.mu.Lock()
	defer l.waits.mu.Unlock()
	n := 0
	for _, ln := range l.waits.lines {
		for _, w := range ln.waiters {
			if queued(w) {
				n++
			}
		}
	}
	return n
}
