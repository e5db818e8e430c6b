package asynqfence_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/fencekit/fencekit/asynqfence"
	"github.com/fencekit/fencekit/fencing"
)

// TestServerLimit sends a burst of tasks for one customer through a server with 8 workers
// and WithLimit(2), busy tasks retried (8 tasks) or waiting in the handler (100 tasks): at
// most 2 run at once, 2 do at some point, and every task completes without a failure or a
// retry counted. Each task fences its own invoice, the entity it
// writes: a check keyed by the customer would refuse the older of two concurrent holders.
func TestServerLimit(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		n    int
		work time.Duration
		opts []asynqfence.Option
	}{
		// Over the limit, a task is busy: it goes back to the retry set, uncounted.
		{name: "busy retried", n: 8, work: 300 * time.Millisecond, opts: []asynqfence.Option{asynqfence.WithTTL(2 * time.Second)}},
		// Over the limit, a task waits for a slot inside the handler.
		{name: "busy waits", n: 100, work: 20 * time.Millisecond, opts: []asynqfence.Option{asynqfence.WithLockOptions(fencing.WithMaxWait(15 * time.Second))}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			store := newFencedStore()
			var inflight, most atomic.Int32
			work := asynq.HandlerFunc(func(ctx context.Context, task *asynq.Task) error {
				n := inflight.Add(1)
				defer inflight.Add(-1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				token, _ := fencing.TokenFromContext(ctx)
				select {
				case <-time.After(tt.work):
				case <-ctx.Done():
					return context.Cause(ctx)
				}
				_, invoice, _ := strings.Cut(string(task.Payload()), "|")
				return store.Write("invoice:"+invoice, token, "sent")
			})
			opts := append([]asynqfence.Option{asynqfence.WithLimit(2)}, tt.opts...)
			h.serve(t, asynqfence.Wrap(work, h.locker, accountOf, opts...), asynq.Config{Concurrency: 8})
			ids := make([]string, tt.n)
			for i := range ids {
				ids[i] = h.enqueue(t, "invoice", fmt.Sprintf("customer-9|%d", i), asynq.MaxRetry(3))
			}
			for _, id := range ids {
				if info := h.waitState(t, id, asynq.TaskStateCompleted); info.Retried != 0 {
					t.Errorf("task %s: retried %d times, want 0 (busy is not a failure)", id, info.Retried)
				}
			}
			if m := most.Load(); m != 2 {
				t.Errorf("got at most %d tasks for one customer at once, want 2", m)
			}
			for _, w := range store.Writes() {
				if !w.accepted {
					t.Errorf("write %+v refused", w)
				}
			}
			h.checkStats(t, tt.n, 0)
		})
	}
}

func TestWrapLimitInvalid(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	for _, n := range []int{0, -1, fencing.MaxLimit + 1} {
		ran := false
		handler := asynqfence.Wrap(asynq.HandlerFunc(func(context.Context, *asynq.Task) error { ran = true; return nil }), h.locker, accountOf, asynqfence.WithLimit(n))
		err := handler.ProcessTask(t.Context(), asynq.NewTask("invoice", []byte("customer-9|1")))
		if !errors.Is(err, fencing.ErrInvalid) || !errors.Is(err, asynq.SkipRetry) || ran {
			t.Errorf("WithLimit(%d): got %v (ran %v), want ErrInvalid and SkipRetry without running", n, err, ran)
		}
	}
	if n := h.r.Client.Exists(t.Context(), h.r.Prefix+"{customer-9}:lock").Val(); n != 0 {
		t.Errorf("a refused task wrote the lock")
	}
}
