package fencing

import "time"

// The back-offs other than the queued waiter's polls (WithRetryBackoff), each a constant.
const (
	// retryFirst and retryMost bound the retries of an extension that failed with an error
	// that can pass (a grant's confirmation, Acquire's deferred extension), while the lease
	// lasts.
	retryFirst = 10 * time.Millisecond
	retryMost  = 250 * time.Millisecond
	// campaignFirst and campaignMost bound the pause of Lead between two campaigns that
	// failed (see Locker.Lead).
	campaignFirst = 50 * time.Millisecond
	campaignMost  = time.Second
)

// backoff is the delay between attempts that fail, or between polls while no announcement can
// come: it starts at first and doubles up to most. Waiting, the retries above and the
// notifier share it.
type backoff struct {
	next, first, most time.Duration
}

func newBackoff(first, most time.Duration) backoff {
	return backoff{next: first, first: first, most: most}
}

// step returns the delay before the next attempt and doubles the one after it.
func (b *backoff) step() time.Duration {
	d := b.next
	b.next = min(2*b.next, b.most)
	return d
}

// peek returns the delay step would return, without doubling it.
func (b *backoff) peek() time.Duration { return b.next }

// after returns the delay after n failures in a row, for a back-off whose count is kept
// elsewhere: first doubled n times, at most most.
func (b backoff) after(n int) time.Duration {
	return min(b.first<<min(max(n, 0), 30), b.most)
}
