package room

import (
	"testing"
	"time"
)

// TestLeaseSeen checks when the front waiter checks again after a poll saw the holder's lease:
// as it ends, at once when PTTL said 0 (a lease ending within the millisecond: waiting for the
// next poll would hold a dead holder's resource up for a poll period more), and at the next
// poll when the lock has no lease.
func TestLeaseSeen(t *testing.T) {
	const poll = time.Second
	for _, tc := range []struct {
		name string
		left time.Duration
		max  time.Duration // the next check comes within it
		min  time.Duration // and not before it
	}{
		{"lease left", 300 * time.Millisecond, 302 * time.Millisecond, 250 * time.Millisecond},
		{"ends within the millisecond", 0, 2 * time.Millisecond, 0},
		{"no lease", -time.Millisecond, poll, poll},
		{"longer than a poll", time.Hour, poll, poll},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ln := &line{}
			w := &waiter{ln: ln}
			ln.waiters = []*waiter{w}
			ln.leaseSeen(time.Now(), tc.left)
			if d := ln.nextPoll(w, poll); d > tc.max || d < tc.min {
				t.Errorf("next check in %v, want %v to %v", d, tc.min, tc.max)
			}
			if other := (&waiter{ln: ln}); ln.nextPoll(other, poll) != poll {
				t.Error("a waiter that is not the front one checks before its next poll")
			}
		})
	}
}
