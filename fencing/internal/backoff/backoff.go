// Package backoff is the delay between attempts that fail, or between polls while no
// announcement can come, shared by package fencing and its waiting room.
package backoff

import (
	"math/rand/v2"
	"time"
)

// A Backoff starts at first and doubles up to most.
type Backoff struct {
	next, first, most time.Duration
}

// New returns a Backoff from first to most.
func New(first, most time.Duration) Backoff {
	return Backoff{next: first, first: first, most: most}
}

// Step returns the delay before the next attempt and doubles the one after it.
func (b *Backoff) Step() time.Duration {
	d := b.next
	b.next = min(2*b.next, b.most)
	return d
}

// Peek returns the delay Step would return, without doubling it.
func (b *Backoff) Peek() time.Duration { return b.next }

// After returns the delay after n failures in a row, for a back-off whose count is kept
// elsewhere: first doubled n times, at most most.
func (b Backoff) After(n int) time.Duration {
	return min(b.first<<min(max(n, 0), 30), b.most)
}

// Jitter returns d ±20%.
func Jitter(d time.Duration) time.Duration {
	return d - d/5 + time.Duration(rand.Int64N(int64(2*d/5)+1))
}
