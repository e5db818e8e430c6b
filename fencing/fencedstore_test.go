package fencing_test

import (
	"sync"
	"sync/atomic"
)

// fencedStore is the tests' store: it accepts a write only with a token at least as high as
// the highest it has seen, counts the writes it rejected, and counts stale writes it would
// have accepted had it not checked (which must stay zero when every writer holds the lock).
type fencedStore struct {
	mu       sync.Mutex
	mark     int64
	writes   int
	rejected int
	inside   atomic.Int32 // writers inside a critical section right now
	overlaps atomic.Int32 // times more than one was inside
}

func (s *fencedStore) write(token int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if token < s.mark {
		s.rejected++
		return false
	}
	s.mark = token
	s.writes++
	return true
}

func (s *fencedStore) enter() {
	if s.inside.Add(1) > 1 {
		s.overlaps.Add(1)
	}
}

func (s *fencedStore) leave() { s.inside.Add(-1) }
