package asynqfence_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/fencekit/fencekit/asynqfence"
	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/internal/testkit/redistest"
)

// These tests run real asynq.Servers: on miniredis by default, on the Redis named by
// FENCING_REDIS_ADDR otherwise (database 9, a queue of their own). Each takes a few
// seconds of Asynq's polling, so they run in parallel.

var queueSeq atomic.Int64

// quietLogger keeps Asynq's logs out of the test output.
type quietLogger struct{}

func (quietLogger) Debug(...any) {}
func (quietLogger) Info(...any)  {}
func (quietLogger) Warn(...any)  {}
func (quietLogger) Error(...any) {}
func (quietLogger) Fatal(...any) {}

// harness is one test's Redis, Locker and Asynq queue.
type harness struct {
	r      *redistest.Redis
	locker *fencing.Locker
	queue  string
	client *asynq.Client
	insp   *asynq.Inspector
}

func newHarness(t testing.TB) *harness {
	t.Helper()
	r := redistest.New(t)
	h := &harness{
		r:      r,
		locker: newLocker(t, r),
		queue:  fmt.Sprintf("fktest-%d-%d", time.Now().UnixNano(), queueSeq.Add(1)),
		client: asynq.NewClientFromRedisClient(r.Client),
		insp:   asynq.NewInspectorFromRedisClient(r.Client),
	}
	if r.Mini == nil {
		t.Cleanup(func() { h.deleteQueue(t) }) // runs after the servers' Shutdown
	}
	return h
}

// deleteQueue removes the queue's keys from a real Redis.
func (h *harness) deleteQueue(t testing.TB) {
	_ = h.insp.DeleteQueue(h.queue, true)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	iter := h.r.Client.Scan(ctx, 0, "asynq:{"+h.queue+"}:*", 500).Iterator()
	for iter.Next(ctx) {
		h.r.Client.Del(ctx, iter.Val())
	}
	if err := iter.Err(); err != nil {
		t.Logf("cleanup of queue %s: %v", h.queue, err)
	}
}

// serve starts a server on the harness's queue, shut down when the test ends. Unless cfg
// says otherwise, it polls quickly, uses the adapter's IsFailure and RetryDelay, and retries
// other failures after 1s.
func (h *harness) serve(t testing.TB, handler asynq.Handler, cfg asynq.Config) {
	t.Helper()
	cfg.Queues = map[string]int{h.queue: 1}
	if cfg.Concurrency == 0 {
		cfg.Concurrency = 4
	}
	cfg.TaskCheckInterval = 50 * time.Millisecond
	cfg.DelayedTaskCheckInterval = 200 * time.Millisecond
	cfg.ShutdownTimeout = 3 * time.Second
	cfg.Logger = quietLogger{}
	if cfg.IsFailure == nil {
		cfg.IsFailure = asynqfence.IsFailure(nil)
	}
	if cfg.RetryDelayFunc == nil {
		cfg.RetryDelayFunc = asynqfence.RetryDelay(func(int, error, *asynq.Task) time.Duration { return time.Second })
	}
	srv := asynq.NewServerFromRedisClient(h.r.Client, cfg)
	if err := srv.Start(handler); err != nil {
		t.Fatalf("asynq Start: %v", err)
	}
	t.Cleanup(srv.Shutdown)
}

// enqueue adds a task to the harness's queue; completed tasks are kept for an hour so the
// Inspector can see them.
func (h *harness) enqueue(t testing.TB, typ, payload string, opts ...asynq.Option) string {
	t.Helper()
	opts = append([]asynq.Option{asynq.Queue(h.queue), asynq.Retention(time.Hour)}, opts...)
	info, err := h.client.Enqueue(asynq.NewTask(typ, []byte(payload)), opts...)
	if err != nil {
		t.Fatalf("Enqueue: %v", err)
	}
	return info.ID
}

// task returns the task's info, or nil when it is gone.
func (h *harness) task(t testing.TB, id string) *asynq.TaskInfo {
	t.Helper()
	info, err := h.insp.GetTaskInfo(h.queue, id)
	switch {
	case errors.Is(err, asynq.ErrTaskNotFound):
		return nil
	case err != nil:
		t.Fatalf("GetTaskInfo: %v", err)
	}
	return info
}

// waitState waits until the task reaches state and returns its info.
func (h *harness) waitState(t testing.TB, id string, state asynq.TaskState) *asynq.TaskInfo {
	t.Helper()
	var info *asynq.TaskInfo
	waitFor(t, fmt.Sprintf("task %s to be %v", id, state), func() bool {
		info = h.task(t, id)
		return info != nil && info.State == state
	})
	return info
}

func (h *harness) queueInfo(t testing.TB) *asynq.QueueInfo {
	t.Helper()
	qi, err := h.insp.GetQueueInfo(h.queue)
	if err != nil {
		t.Fatalf("GetQueueInfo: %v", err)
	}
	return qi
}

// checkStats compares the queue's processed and failed counts, today's and in total.
func (h *harness) checkStats(t testing.TB, processed, failed int) {
	t.Helper()
	qi := h.queueInfo(t)
	if qi.Processed != processed || qi.ProcessedTotal != processed || qi.Failed != failed || qi.FailedTotal != failed {
		t.Fatalf("got processed %d (total %d), failed %d (total %d); want processed %d, failed %d",
			qi.Processed, qi.ProcessedTotal, qi.Failed, qi.FailedTotal, processed, failed)
	}
}

// waitFor polls cond until it holds, for at most 20s.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after 20s waiting for %s", what)
		}
		<-tick.C
	}
}

// accountOf locks the account named before the '|' in the payload.
func accountOf(t *asynq.Task) (string, error) {
	acct, _, ok := strings.Cut(string(t.Payload()), "|")
	if !ok {
		return "", fmt.Errorf("payload %q has no '|'", t.Payload())
	}
	return acct, nil
}

// TestServerSerialisesPerResource sends many tasks for one resource through a server with
// several workers: they run one at a time, in token order, and every one completes once.
func TestServerSerialisesPerResource(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		n    int
		opts []asynqfence.Option
	}{
		// Busy tasks go back to the retry set and return after about the 2s lease.
		{name: "busy retried", n: 4, opts: []asynqfence.Option{asynqfence.WithTTL(2 * time.Second)}},
		// Busy tasks wait for the lock inside the handler.
		{name: "busy waits", n: 20, opts: []asynqfence.Option{asynqfence.WithLockOptions(fencing.WithMaxWait(15 * time.Second))}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			store := newFencedStore()
			var inflight, most atomic.Int32
			var mu sync.Mutex
			runs := make(map[string]int)
			work := asynq.HandlerFunc(func(ctx context.Context, task *asynq.Task) error {
				n := inflight.Add(1)
				defer inflight.Add(-1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				token, _ := fencing.TokenFromContext(ctx)
				select { // simulated work, so overlapping runs would show
				case <-time.After(20 * time.Millisecond):
				case <-ctx.Done():
					return context.Cause(ctx)
				}
				if err := store.Write("acct", token, string(task.Payload())); err != nil {
					return err
				}
				mu.Lock()
				runs[string(task.Payload())]++
				mu.Unlock()
				return nil
			})
			h.serve(t, asynqfence.Wrap(work, h.locker, accountOf, tt.opts...), asynq.Config{Concurrency: 8})
			ids := make([]string, tt.n)
			for i := range ids {
				ids[i] = h.enqueue(t, "deposit", fmt.Sprintf("acct|%d", i), asynq.MaxRetry(3))
			}
			for _, id := range ids {
				h.waitState(t, id, asynq.TaskStateCompleted)
			}

			if m := most.Load(); m != 1 {
				t.Errorf("got %d tasks for one resource running at once, want 1", m)
			}
			mu.Lock()
			if len(runs) != tt.n {
				t.Errorf("got %d distinct tasks run, want %d", len(runs), tt.n)
			}
			for p, c := range runs {
				if c != 1 {
					t.Errorf("task %s ran to completion %d times, want 1", p, c)
				}
			}
			mu.Unlock()
			prev := int64(0)
			for _, w := range store.Writes() {
				if !w.accepted || w.token <= prev {
					t.Errorf("got write %+v after token %d, want accepted writes in increasing token order", w, prev)
				}
				prev = w.token
			}
			qi := h.queueInfo(t)
			if qi.Pending+qi.Active+qi.Scheduled+qi.Retry+qi.Archived != 0 || qi.Completed != tt.n {
				t.Errorf("got queue %+v, want all %d tasks completed", qi, tt.n)
			}
			h.checkStats(t, tt.n, 0)
		})
	}
}

// TestServerParallelAcrossResources checks that tasks for different resources run at once:
// each handler waits until all of them are inside.
func TestServerParallelAcrossResources(t *testing.T) {
	t.Parallel()
	const n = 4
	h := newHarness(t)
	var arrived atomic.Int32
	all := make(chan struct{})
	work := asynq.HandlerFunc(func(ctx context.Context, _ *asynq.Task) error {
		if _, ok := fencing.TokenFromContext(ctx); !ok {
			return errors.New("no token in context")
		}
		if arrived.Add(1) == n {
			close(all)
		}
		select {
		case <-all:
			return nil
		case <-time.After(10 * time.Second):
			return errors.New("the other resources' tasks did not run alongside within 10s")
		}
	})
	h.serve(t, asynqfence.Wrap(work, h.locker, accountOf), asynq.Config{Concurrency: n})
	var ids []string
	for i := range n {
		ids = append(ids, h.enqueue(t, "deposit", fmt.Sprintf("acct-%d|1", i), asynq.MaxRetry(0)))
	}
	for _, id := range ids {
		if info := h.waitState(t, id, asynq.TaskStateCompleted); info.LastErr != "" {
			t.Errorf("task %s: got error %q, want none", id, info.LastErr)
		}
	}
}

// holdLock holds resource through Locker.Do, renewing a 3s lease, until release is called (or
// the test ends). A busy task is retried after the holder's remaining lease, so the lease is
// short enough for a few retries within a test, and long enough that renewals missed on a
// loaded machine (-race, parallel tests) do not let the lock go (with 1s, CI saw it go).
func holdLock(t *testing.T, l *fencing.Locker, resource string) (release func()) {
	t.Helper()
	held := make(chan struct{})
	stop := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- l.Do(context.Background(), resource, func(context.Context) error {
			close(held)
			<-stop
			return nil
		}, fencing.WithTTL(3*time.Second))
	}()
	select {
	case <-held:
	case err := <-done:
		t.Fatalf("holding %q: %v", resource, err)
	}
	var once sync.Once
	release = func() {
		once.Do(func() {
			close(stop)
			if err := <-done; err != nil {
				t.Errorf("holding %q: %v", resource, err)
			}
		})
	}
	t.Cleanup(release)
	return release
}

// busyCounter is an ErrorHandler that counts busy errors and remembers the retry counts
// their tasks had.
type busyCounter struct {
	busy, other atomic.Int32
	mu          sync.Mutex
	retries     []int
}

func (c *busyCounter) HandleError(ctx context.Context, _ *asynq.Task, err error) {
	if !asynqfence.IsBusy(err) {
		c.other.Add(1)
		return
	}
	n, _ := asynq.GetRetryCount(ctx)
	c.mu.Lock()
	c.retries = append(c.retries, n)
	c.mu.Unlock()
	c.busy.Add(1)
}

// TestServerBusyKeepsRetryBudget checks that busy attempts neither use up the task's retries
// nor count in the queue's statistics when IsFailure and RetryDelay are configured.
func TestServerBusyKeepsRetryBudget(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	release := holdLock(t, h.locker, "acct")
	errs := &busyCounter{}
	var retryCount atomic.Int32
	retryCount.Store(-1)
	work := asynq.HandlerFunc(func(ctx context.Context, _ *asynq.Task) error {
		n, ok := asynq.GetRetryCount(ctx)
		if !ok {
			return errors.New("no retry count in context")
		}
		retryCount.Store(int32(n))
		return nil
	})
	h.serve(t, asynqfence.Wrap(work, h.locker, accountOf), asynq.Config{ErrorHandler: errs})
	// With one retry, a second counted failure would archive the task: two busy attempts
	// that left it neither archived nor retried show that neither counted.
	id := h.enqueue(t, "deposit", "acct|1", asynq.MaxRetry(1))

	waitFor(t, "two busy attempts", func() bool { return errs.busy.Load() >= 2 })
	info := h.task(t, id)
	if info == nil || info.State == asynq.TaskStateArchived || info.Retried != 0 {
		t.Fatalf("after 2 busy attempts got task %+v, want it not archived, retried 0", info)
	}
	h.checkStats(t, 0, 0)

	release()
	info = h.waitState(t, id, asynq.TaskStateCompleted)
	if got := retryCount.Load(); got != 0 {
		t.Errorf("handler saw retry count %d, want 0", got)
	}
	if info.Retried != 0 {
		t.Errorf("got Retried %d after completion, want 0", info.Retried)
	}
	errs.mu.Lock()
	for _, n := range errs.retries {
		if n != 0 {
			t.Errorf("a busy attempt had retry count %d, want 0", n)
		}
	}
	errs.mu.Unlock()
	if n := errs.other.Load(); n != 0 {
		t.Errorf("got %d errors other than busy, want 0", n)
	}
	h.checkStats(t, 1, 0)
}

// TestServerMaxRetryZeroArchivedWhenBusy shows the documented trap: Asynq archives a task
// with no retries left before it asks IsFailure, busy or not.
func TestServerMaxRetryZeroArchivedWhenBusy(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	holdLock(t, h.locker, "acct")
	var ran atomic.Int32
	work := asynq.HandlerFunc(func(context.Context, *asynq.Task) error { ran.Add(1); return nil })
	h.serve(t, asynqfence.Wrap(work, h.locker, accountOf), asynq.Config{})
	id := h.enqueue(t, "deposit", "acct|1", asynq.MaxRetry(0))

	info := h.waitState(t, id, asynq.TaskStateArchived)
	if info.Retried != 0 || !strings.Contains(info.LastErr, "not acquired") {
		t.Errorf("got retried %d, last error %q; want 0 and the busy error", info.Retried, info.LastErr)
	}
	if n := ran.Load(); n != 0 {
		t.Errorf("handler ran %d times, want 0", n)
	}
	h.checkStats(t, 1, 1)
}

// TestServerDropDuplicates checks that WithDropDuplicates revokes a busy task: done, neither
// retried nor archived, and not counted as failed.
func TestServerDropDuplicates(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	holdLock(t, h.locker, "acct")
	errs := &busyCounter{}
	var ran atomic.Int32
	work := asynq.HandlerFunc(func(context.Context, *asynq.Task) error { ran.Add(1); return nil })
	h.serve(t, asynqfence.Wrap(work, h.locker, accountOf, asynqfence.WithDropDuplicates()), asynq.Config{ErrorHandler: errs})
	id := h.enqueue(t, "deposit", "acct|1", asynq.MaxRetry(3))

	waitFor(t, "the task to be dropped", func() bool { return errs.busy.Load() >= 1 && h.task(t, id) == nil })
	if n := ran.Load(); n != 0 {
		t.Errorf("handler ran %d times, want 0", n)
	}
	if n := errs.busy.Load(); n != 1 {
		t.Errorf("got %d busy attempts, want 1", n)
	}
	qi := h.queueInfo(t)
	if qi.Pending+qi.Active+qi.Scheduled+qi.Retry+qi.Archived+qi.Completed != 0 {
		t.Errorf("got queue %+v, want it empty", qi)
	}
	h.checkStats(t, 1, 0)
}

// TestServerStaleWriteRejected delivers one task twice: the first delivery stalls past its
// lease (its lock key disappears, as when a paused worker misses its renewals), the second
// takes the lock with a newer token and writes, and the first then writes late. The fenced
// store rejects the late write, and the first delivery's context was cancelled with
// ErrNotHeld before it.
func TestServerStaleWriteRejected(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	store := newFencedStore()
	var first atomic.Bool
	stalled := make(chan context.Context, 1)
	resume := make(chan struct{})
	work := asynq.HandlerFunc(func(ctx context.Context, task *asynq.Task) error {
		token, _ := fencing.TokenFromContext(ctx)
		if first.CompareAndSwap(false, true) {
			stalled <- ctx
			<-resume // a call that ignores its context
		}
		if err := store.Write("acct", token, string(task.Payload())); err != nil {
			return fmt.Errorf("write: %w", err)
		}
		return nil
	})
	handler := asynqfence.Wrap(work, h.locker, accountOf, asynqfence.WithTTL(time.Second))
	// Two workers on one queue.
	h.serve(t, handler, asynq.Config{Concurrency: 2})
	h.serve(t, handler, asynq.Config{Concurrency: 2})
	defer close(resume)

	id1 := h.enqueue(t, "deposit", "acct|1", asynq.MaxRetry(0))
	var ctx1 context.Context
	select {
	case ctx1 = <-stalled:
	case <-time.After(20 * time.Second):
		t.Fatal("the first delivery did not start within 20s")
	}
	if err := h.r.Client.Del(t.Context(), h.r.Prefix+"{acct}:lock").Err(); err != nil {
		t.Fatalf("DEL: %v", err)
	}
	select {
	case <-ctx1.Done():
		if cause := context.Cause(ctx1); !errors.Is(cause, fencing.ErrNotHeld) {
			t.Fatalf("the stalled delivery's context ended with %v, want ErrNotHeld", cause)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the stalled delivery's context was not cancelled within 10s of losing the lock")
	}

	id2 := h.enqueue(t, "deposit", "acct|1", asynq.MaxRetry(0))
	h.waitState(t, id2, asynq.TaskStateCompleted)
	resume <- struct{}{}
	info := h.waitState(t, id1, asynq.TaskStateArchived)

	writes := store.Writes()
	if len(writes) != 2 || !writes[0].accepted || writes[1].accepted || writes[1].token >= writes[0].token {
		t.Fatalf("got writes %+v, want the newer token accepted, then the older one rejected", writes)
	}
	if !strings.Contains(info.LastErr, errStale.Error()) || !strings.Contains(info.LastErr, fencing.ErrNotHeld.Error()) {
		t.Errorf("got last error %q, want the stale write and the lost lock", info.LastErr)
	}
}

// TestServerMux runs the middleware on a ServeMux: unknown and unlocked task types pass
// straight through, and a task whose resource cannot be derived is archived at once.
func TestServerMux(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	var mu sync.Mutex
	tokens := make(map[string]int64)
	record := func(ctx context.Context, task *asynq.Task) error {
		tok, ok := fencing.TokenFromContext(ctx)
		if !ok {
			tok = -1
		}
		mu.Lock()
		tokens[task.Type()] = tok
		mu.Unlock()
		return nil
	}
	mux := asynq.NewServeMux()
	mux.HandleFunc("deposit", record)
	mux.HandleFunc("report", record)
	mux.Use(asynqfence.Middleware(h.locker, func(task *asynq.Task) (string, error) {
		switch task.Type() {
		case "deposit":
			return accountOf(task)
		}
		return "", nil // report, and unknown types: no lock
	}))
	h.serve(t, mux, asynq.Config{})

	deposit := h.enqueue(t, "deposit", "acct|1", asynq.MaxRetry(3))
	report := h.enqueue(t, "report", "", asynq.MaxRetry(3))
	unknown := h.enqueue(t, "no-such-type", "x", asynq.MaxRetry(0))
	bad := h.enqueue(t, "deposit", "no account", asynq.MaxRetry(3))

	h.waitState(t, deposit, asynq.TaskStateCompleted)
	h.waitState(t, report, asynq.TaskStateCompleted)
	mu.Lock()
	if tokens["deposit"] != 1 || tokens["report"] != -1 {
		t.Errorf("got tokens %v, want deposit:1 and report without a token", tokens)
	}
	mu.Unlock()

	info := h.waitState(t, unknown, asynq.TaskStateArchived)
	if !strings.Contains(info.LastErr, asynq.ErrHandlerNotFound.Error()) || strings.Contains(info.LastErr, "asynqfence") {
		t.Errorf("unknown type: got last error %q, want Asynq's own not-found error", info.LastErr)
	}
	info = h.waitState(t, bad, asynq.TaskStateArchived)
	if info.Retried != 0 || !strings.Contains(info.LastErr, "asynqfence: resource of task") {
		t.Errorf("bad payload: got retried %d, last error %q; want archived at once with the ResourceFunc's error", info.Retried, info.LastErr)
	}
	h.checkStats(t, 4, 2)
}
