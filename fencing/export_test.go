package fencing

// Waiters returns the number of waiters queued in l, for tests.
func Waiters(l *Locker) int {
	l.hub.mu.Lock()
	defer l.hub.mu.Unlock()
	n := 0
	for _, q := range l.hub.queues {
		n += len(q.waiters)
	}
	return n
}
