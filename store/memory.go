package store

import (
	"sync"
	"sync/atomic"
)

// Memory is an in-process fencing check: it keeps one high-water mark per resource
// and refuses tokens below it. Use it when the protected state lives in this
// process (a cache, a file, a connection to a device) and the writers that hold a
// fencing lock all call into it.
//
// The zero value is an empty Memory ready for use. A Memory must not be copied after
// first use. It is safe for concurrent use by multiple goroutines. It keeps one small
// entry per resource ever admitted and never forgets one: forgetting a mark would let
// stale tokens through again.
type Memory struct {
	mu    sync.Mutex
	marks map[string]*memoryMark
}

// memoryMark is one resource's high-water mark. mu serialises admissions and the
// guarded writes; mark is only written with mu held and read without it.
type memoryMark struct {
	mu   sync.Mutex
	mark atomic.Int64
}

// Write runs fn when token is at least the resource's high-water mark, and records
// token as the new mark when fn returns nil. The check, fn and the update of the mark
// happen under a lock for resource, so no other Write or Admit for the same resource
// can interleave; writes to other resources proceed in parallel. fn must not call
// Write or Admit for the same resource (it would deadlock).
//
// If token is below the mark, Write does not run fn and returns a [*StaleTokenError]
// (matching [ErrStaleToken]). If fn returns an error, Write returns that error
// unchanged and leaves the mark as it was. If resource is empty, token is below 1, fn
// is nil or m is a nil *Memory, Write returns an error matching [ErrInvalid], runs
// nothing and records nothing. If fn panics,
// the lock is released, the mark is unchanged and the panic continues.
func (m *Memory) Write(resource string, token int64, fn func() error) error {
	if fn == nil {
		return invalid("store: write %q: nil func", resource)
	}
	e, err := m.entry("write", resource, token)
	if err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if mark := e.mark.Load(); token < mark {
		return &StaleTokenError{Resource: resource, Token: token, Mark: mark}
	}
	if err := fn(); err != nil {
		return err
	}
	e.mark.Store(token)
	return nil
}

// Admit checks token against the resource's high-water mark and, when the token is
// at least the mark, records it as the new mark, atomically. Use it when admitting
// the token is itself the guarded step (for example accepting a command that carries
// a token); when the state to protect is written afterwards, use [Memory.Write]
// instead, because a newer holder could write between Admit and the caller's write.
//
// If token is below the mark, Admit returns a [*StaleTokenError] (matching
// [ErrStaleToken]) and leaves the mark unchanged. If resource is empty, token is
// below 1 or m is a nil *Memory, it returns an error matching [ErrInvalid] and records
// nothing.
func (m *Memory) Admit(resource string, token int64) error {
	e, err := m.entry("admit", resource, token)
	if err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if mark := e.mark.Load(); token < mark {
		return &StaleTokenError{Resource: resource, Token: token, Mark: mark}
	}
	e.mark.Store(token)
	return nil
}

// Mark returns the resource's high-water mark: the highest token admitted, or whose
// Write succeeded, so far; 0 for a resource never admitted (including ""). It does
// not wait for a Write in progress, whose token is not counted until its fn returns.
// A nil *Memory has no marks: Mark returns 0.
func (m *Memory) Mark(resource string) int64 {
	if m == nil {
		return 0
	}
	m.mu.Lock()
	e := m.marks[resource]
	m.mu.Unlock()
	if e == nil {
		return 0
	}
	return e.mark.Load()
}

// entry validates the arguments and returns the resource's mark, creating it.
func (m *Memory) entry(op, resource string, token int64) (*memoryMark, error) {
	if m == nil {
		return nil, invalid("store: %s %q: nil *Memory", op, resource)
	}
	if resource == "" {
		return nil, invalid("store: %s: empty resource", op)
	}
	if err := checkToken(op, resource, token); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.marks[resource]
	if e == nil {
		if m.marks == nil {
			m.marks = make(map[string]*memoryMark)
		}
		e = new(memoryMark)
		m.marks[resource] = e
	}
	return e, nil
}
