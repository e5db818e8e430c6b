package cronfence_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/internal/testkit/redistest"
	"github.com/fencekit/fencekit/leader"
)

// waitLimit bounds every wait of the tests; reaching it fails the test.
const waitLimit = 20 * time.Second

// newLocker returns a Locker on c with the test's prefix, closed when the test ends.
func newLocker(t *testing.T, r *redistest.Redis, c *redis.Client, opts ...fencing.Option) *fencing.Locker {
	t.Helper()
	l := fencing.New(c, append([]fencing.Option{fencing.WithPrefix(r.Prefix)}, opts...)...)
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// campaign runs e.Run until the test ends (or until the returned function is called, which
// waits for Run to return and returns its error).
func campaign(t *testing.T, e *leader.Elector) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case err = <-done:
			case <-time.After(waitLimit):
				err = errors.New("Run did not return")
			}
		})
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

// waitFor polls cond until it holds; it fails the test after waitLimit.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", waitLimit, what)
		}
		<-tick.C
	}
}

// waitLeading waits until e leads, and returns its epoch.
func waitLeading(t *testing.T, e *leader.Elector) int64 {
	t.Helper()
	var epoch int64
	waitFor(t, "the elector to lead", func() bool {
		var ok bool
		epoch, ok = e.Token()
		return ok
	})
	return epoch
}

// skips records the errors a WithSkipHandler handler is called with.
type skips struct {
	mu   sync.Mutex
	errs []error
}

func (s *skips) add(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.errs = append(s.errs, err)
}

func (s *skips) take() []error {
	s.mu.Lock()
	defer s.mu.Unlock()
	errs := s.errs
	s.errs = nil
	return errs
}
