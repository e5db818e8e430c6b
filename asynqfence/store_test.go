package asynqfence_test

import (
	"errors"
	"fmt"
	"sync"
)

// errStale is the fenced store's rejection of a write with an old token.
var errStale = errors.New("store: stale token")

// write is one write the store saw.
type write struct {
	key, value string
	token      int64
	accepted   bool
}

// fencedStore is an in-memory key-value store that checks fencing tokens: it accepts a write
// whose token is at least the highest it has seen for the key, and rejects the others.
type fencedStore struct {
	mu     sync.Mutex
	hwm    map[string]int64
	values map[string]string
	log    []write
}

func newFencedStore() *fencedStore {
	return &fencedStore{hwm: make(map[string]int64), values: make(map[string]string)}
}

// Write sets key to value if token is not older than every token seen for key.
func (s *fencedStore) Write(key string, token int64, value string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	ok := token >= s.hwm[key]
	s.log = append(s.log, write{key: key, value: value, token: token, accepted: ok})
	if !ok {
		return fmt.Errorf("%w: %d < %d for %q", errStale, token, s.hwm[key], key)
	}
	s.hwm[key], s.values[key] = token, value
	return nil
}

// Writes returns the writes seen so far, in order.
func (s *fencedStore) Writes() []write {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]write(nil), s.log...)
}
