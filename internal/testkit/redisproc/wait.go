package redisproc

import (
	"errors"
	"fmt"
	"time"
)

// pollInterval is how often a wait checks its condition again.
const pollInterval = 20 * time.Millisecond

// errStopped is returned by waitFor when stop is closed before the condition holds.
var errStopped = errors.New("process exited")

// waitFor checks cond every pollInterval until it holds, the deadline passes, or stop (if
// not nil) is closed. cond returns whether it holds and, when it does not, why; the last
// reason is part of the timeout error.
func waitFor(deadline time.Time, stop <-chan struct{}, cond func() (bool, string)) error {
	ticker := time.NewTicker(pollInterval)
	defer ticker.Stop()
	for {
		ok, why := cond()
		if ok {
			return nil
		}
		if !time.Now().Before(deadline) {
			return fmt.Errorf("timed out: %s", why)
		}
		select {
		case <-stop:
			return fmt.Errorf("%w: %s", errStopped, why)
		case <-ticker.C:
		}
	}
}

// minWait is the least time remaining gives a single command, so that the last check
// before a deadline can still succeed.
const minWait = 100 * time.Millisecond

// remaining returns the time left until deadline, but at least minWait.
func remaining(deadline time.Time) time.Duration {
	return max(time.Until(deadline), minWait)
}
