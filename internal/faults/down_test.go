package faults_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/fencing/observe"
	"github.com/fencekit/fencekit/internal/testkit/redisproc"
)

// TestRedisDownDuringDo stops Redis (SIGKILL, or SIGSTOP) while work runs under Do: the
// work's context must be cancelled, with a cause matching ErrNotHeld, by the time the
// lease's local validity ends. Hooks record when the last acquisition or renewal that
// succeeded before the fault finished: the validity ends at most 0.99 TTL after that.
//
// A stopped server answers nothing, and go-redis bounds socket reads by the context's
// deadline only with ContextTimeoutEnabled; otherwise by ReadTimeout (3 s by default). Do
// therefore keeps a timer of its own for the lease's local end, which cancels the work even
// while a renewal is stuck: the "pause-no-context-timeout" case (ReadTimeout 1 s, longer
// than the lease) checks it.
func TestRedisDownDuringDo(t *testing.T) {
	redisproc.Require(t)
	t.Parallel()
	const (
		ttl    = 300 * time.Millisecond
		rounds = 3
		slack  = 100 * time.Millisecond // scheduling on a shared, -race machine
	)
	for _, fault := range []string{"kill", "pause", "pause-no-context-timeout"} {
		t.Run(fault, func(t *testing.T) {
			configure := func(o *redis.Options) { o.ContextTimeoutEnabled = true }
			if fault == "pause-no-context-timeout" {
				configure = func(o *redis.Options) { o.ReadTimeout = time.Second }
			}
			var worstOver, worstAfterFault time.Duration
			worstOver = -time.Hour
			for round := range rounds {
				s := redisproc.Start(t)
				var mu sync.Mutex
				var lastOK, lostAt time.Time
				hooks := observe.Hooks{
					End: func(_ context.Context, e observe.Event) {
						if e.Outcome == observe.OutcomeAcquired || (e.Op == observe.OpRenew && e.Outcome == observe.OutcomeOK) {
							mu.Lock()
							lastOK = time.Now()
							mu.Unlock()
						}
					},
					Lost: func(context.Context, observe.Event) {
						mu.Lock()
						lostAt = time.Now()
						mu.Unlock()
					},
				}
				l := newLocker(t, s.Client(t, configure), fencing.WithTTL(ttl), fencing.WithHooks(hooks))
				var faultAt, cancelAt, validUntil time.Time
				var cause error
				err := l.Do(context.Background(), "res", func(ctx context.Context) error {
					// Let one renewal happen first, so the fault hits a renewed lease.
					waitUntil(t, 5*time.Second, "a renewal", func() bool {
						mu.Lock()
						defer mu.Unlock()
						return time.Since(lastOK) < ttl/3 && lastOK.After(time.Now().Add(-ttl))
					})
					if fault == "kill" {
						s.Kill()
					} else {
						s.Pause()
					}
					faultAt = time.Now()
					mu.Lock()
					validUntil = lastOK.Add(ttl - ttl/100)
					mu.Unlock()
					select {
					case <-ctx.Done():
						cancelAt = time.Now()
					case <-time.After(10 * time.Second):
						t.Errorf("round %d: the work was not cancelled within 10s", round)
					}
					cause = context.Cause(ctx)
					return nil
				})
				if fault != "kill" {
					s.Resume()
				}
				if !errors.Is(cause, fencing.ErrNotHeld) || !errors.Is(err, fencing.ErrNotHeld) {
					t.Fatalf("round %d: cause %v, Do's error %v; want ErrNotHeld", round, cause, err)
				}
				over := cancelAt.Sub(validUntil)
				if over > slack {
					t.Errorf("round %d: cancelled %v after the lease's local end (Lost hook %v after it)", round, over, lostAt.Sub(validUntil))
				}
				worstOver = max(worstOver, over)
				worstAfterFault = max(worstAfterFault, cancelAt.Sub(faultAt))
			}
			figure(t, "redis-down-during-do-"+fault, "rounds=%d ttl=%v cancelled_after_fault<=%v worst_cancel_minus_local_validity_end=%v cause=ErrNotHeld",
				rounds, ttl, worstAfterFault.Round(time.Millisecond), worstOver.Round(time.Millisecond))
		})
	}
}
