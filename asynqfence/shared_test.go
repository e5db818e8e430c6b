package asynqfence_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/fencekit/fencekit/asynqfence"
	"github.com/fencekit/fencekit/fencing"
)

// TestServerShared runs reports (shared) and an update (exclusive) of one account through a
// server with 8 workers and WithShared: reports run together, the update never runs beside
// anything, and every task completes without a counted failure.
func TestServerShared(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	var readers, writers, most, overlaps atomic.Int32
	work := asynq.HandlerFunc(func(ctx context.Context, task *asynq.Task) error {
		if task.Type() == "update" {
			if writers.Add(1) != 1 || readers.Load() != 0 {
				overlaps.Add(1)
			}
			defer writers.Add(-1)
		} else {
			n := readers.Add(1)
			defer readers.Add(-1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			if writers.Load() != 0 {
				overlaps.Add(1)
			}
		}
		select {
		case <-time.After(100 * time.Millisecond):
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	})
	reports := func(task *asynq.Task) bool { return task.Type() == "report" }
	h.serve(t, asynqfence.Wrap(work, h.locker, accountOf, asynqfence.WithShared(reports),
		asynqfence.WithLockOptions(fencing.WithMaxWait(15*time.Second))), asynq.Config{Concurrency: 8})
	var ids []string
	for i := range 12 {
		typ := "report"
		if i == 6 {
			typ = "update"
		}
		ids = append(ids, h.enqueue(t, typ, fmt.Sprintf("acct-1|%d", i), asynq.MaxRetry(3)))
	}
	for _, id := range ids {
		h.waitState(t, id, asynq.TaskStateCompleted)
	}
	if overlaps.Load() != 0 {
		t.Fatalf("%d tasks overlapped the update", overlaps.Load())
	}
	if most.Load() < 2 {
		t.Fatalf("at most %d reports at once, want them to run together", most.Load())
	}
	h.checkStats(t, len(ids), 0)
}

func TestWrapSharedInvalid(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	yes := func(*asynq.Task) bool { return true }
	for name, handler := range map[string]asynq.Handler{
		"with a limit": asynqfence.Wrap(asynq.HandlerFunc(func(context.Context, *asynq.Task) error { return nil }), h.locker, accountOf,
			asynqfence.WithShared(yes), asynqfence.WithLimit(2)),
		"MiddlewareAll": asynqfence.MiddlewareAll(h.locker, func(*asynq.Task) ([]string, error) { return []string{"a"}, nil },
			asynqfence.WithShared(yes))(asynq.HandlerFunc(func(context.Context, *asynq.Task) error { return nil })),
	} {
		err := handler.ProcessTask(t.Context(), asynq.NewTask("report", []byte("customer-9|1")))
		if !errors.Is(err, fencing.ErrInvalid) || !errors.Is(err, asynq.SkipRetry) {
			t.Errorf("%s: got %v, want ErrInvalid and SkipRetry", name, err)
		}
	}
}
