package echofencetest

import (
	"fmt"
	"sync"
)

// fencedStore is an in-memory store that checks fencing tokens: a write with a token below
// the highest one accepted for its key is refused and counted as stale.
type fencedStore struct {
	mu       sync.Mutex
	mark     map[string]int64
	accepted map[string][]int64
	stale    int
}

func newFencedStore() *fencedStore {
	return &fencedStore{mark: map[string]int64{}, accepted: map[string][]int64{}}
}

func (s *fencedStore) write(key string, token int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if token < 1 || token < s.mark[key] {
		s.stale++
		return fmt.Errorf("stale token %d for %q, mark %d", token, key, s.mark[key])
	}
	s.mark[key] = token
	s.accepted[key] = append(s.accepted[key], token)
	return nil
}

func (s *fencedStore) staleWrites() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stale
}

func (s *fencedStore) tokens(key string) []int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]int64(nil), s.accepted[key]...)
}
