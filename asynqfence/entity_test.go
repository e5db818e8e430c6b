package asynqfence_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/fencekit/fencekit/asynqfence"
	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/fencing/fencingtest"
	"github.com/fencekit/fencekit/internal/testkit/redistest"
	"github.com/fencekit/fencekit/store"
)

// tenantOf locks the tenant named before the '|' of an export task's payload, and exportOf
// the export named after it: "tenant:1|A" runs under a slot of "tenant:1" and "export:A".
func tenantOf(t *asynq.Task) (string, error) {
	tenant, _, _ := strings.Cut(string(t.Payload()), "|")
	return tenant, nil
}

func exportOf(t *asynq.Task) (string, error) {
	_, export, _ := strings.Cut(string(t.Payload()), "|")
	if export == "" {
		return "", nil
	}
	return "export:" + export, nil
}

// withEntity is the adapter's setup of these tests: two exports at once per tenant, and each
// export's own lock.
func withEntity(opts ...asynqfence.Option) []asynqfence.Option {
	return append([]asynqfence.Option{asynqfence.WithLimit(2), asynqfence.WithEntity(exportOf)}, opts...)
}

// holders returns how many holders resource has.
func holders(t *testing.T, l *fencing.Locker, resource string) int {
	t.Helper()
	st, err := l.Inspect(context.Background(), resource)
	if err != nil {
		t.Fatalf("Inspect %s: %v", resource, err)
	}
	return len(st.Holders)
}

// TestWrapEntity checks WithEntity on one call of the handler: the tokens in its context, a
// busy entity or tenant (neither held, the busy one's RetryAfter), the release of both after
// a return or a panic, the loss of either cancelling the handler, and the setups it refuses.
func TestWrapEntity(t *testing.T) {
	t.Parallel()
	task := func(payload string) *asynq.Task { return asynq.NewTask("export", []byte(payload)) }
	t.Run("tokens", func(t *testing.T) {
		r := redistest.New(t)
		l := newLocker(t, r)
		for range 3 { // the tenant's counter moves ahead of the export's
			if err := l.Do(t.Context(), "tenant:1", func(context.Context) error { return nil }, fencing.WithLimit(2)); err != nil {
				t.Fatal(err)
			}
		}
		type seen struct {
			token, entity, slot  int64
			ok, entityOK, slotOK bool
			validUntil           bool
		}
		var got seen
		h := asynqfence.Wrap(asynq.HandlerFunc(func(ctx context.Context, _ *asynq.Task) error {
			got.token, got.ok = fencing.TokenFromContext(ctx)
			got.entity, got.entityOK = fencing.TokenFor(ctx, "export:A")
			got.slot, got.slotOK = fencing.TokenFor(ctx, "tenant:1")
			_, got.validUntil = fencing.ValidUntilFromContext(ctx)
			if n := holders(t, l, "tenant:1") + holders(t, l, "export:A"); n != 2 {
				return fmt.Errorf("%d holders of the tenant and the export, want 2", n)
			}
			return nil
		}), l, tenantOf, withEntity()...)
		if err := h.ProcessTask(t.Context(), task("tenant:1|A")); err != nil {
			t.Fatal(err)
		}
		want := seen{token: 1, entity: 1, slot: 4, ok: true, entityOK: true, slotOK: true}
		if got != want {
			t.Fatalf("the handler saw %+v, want %+v: the export's token from TokenFromContext, both from TokenFor", got, want)
		}
		if n := holders(t, l, "tenant:1") + holders(t, l, "export:A"); n != 0 {
			t.Fatalf("%d holders left after the task, want both released", n)
		}
	})
	t.Run("entity busy", func(t *testing.T) {
		r := redistest.New(t)
		l := newLocker(t, r)
		held, err := l.TryAcquire(t.Context(), "export:A", fencing.WithTTL(20*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		defer held.Release(context.Background())
		rec := &recorder{}
		err = asynqfence.Wrap(rec, l, tenantOf, withEntity()...).ProcessTask(t.Context(), task("tenant:1|A"))
		checkBusy(t, err, "export:A", 10*time.Second, 20*time.Second)
		if rec.calls.Load() != 0 || holders(t, l, "tenant:1") != 0 {
			t.Fatalf("handler ran %d times, tenant has %d holders; want neither", rec.calls.Load(), holders(t, l, "tenant:1"))
		}
	})
	t.Run("tenant busy", func(t *testing.T) {
		r := redistest.New(t)
		l := newLocker(t, r)
		for _, ttl := range []time.Duration{7 * time.Second, 9 * time.Second} {
			held, err := l.TryAcquire(t.Context(), "tenant:1", fencing.WithLimit(2), fencing.WithTTL(ttl))
			if err != nil {
				t.Fatal(err)
			}
			defer held.Release(context.Background())
		}
		rec := &recorder{}
		err := asynqfence.Wrap(rec, l, tenantOf, withEntity()...).ProcessTask(t.Context(), task("tenant:1|A"))
		checkBusy(t, err, "tenant:1", time.Second, 7*time.Second) // the earliest end of the slots' leases
		if rec.calls.Load() != 0 || holders(t, l, "export:A") != 0 {
			t.Fatalf("handler ran %d times, export has %d holders; want neither", rec.calls.Load(), holders(t, l, "export:A"))
		}
	})
	t.Run("panic", func(t *testing.T) {
		r := redistest.New(t)
		l := newLocker(t, r)
		h := asynqfence.Wrap(asynq.HandlerFunc(func(context.Context, *asynq.Task) error { panic("boom") }), l, tenantOf, withEntity()...)
		func() {
			defer func() {
				if p := recover(); p != "boom" {
					t.Fatalf("got panic %v, want boom", p)
				}
			}()
			_ = h.ProcessTask(t.Context(), task("tenant:1|A"))
		}()
		if n := holders(t, l, "tenant:1") + holders(t, l, "export:A"); n != 0 {
			t.Fatalf("%d holders left after the panic, want both released", n)
		}
	})
	for _, lose := range []string{"export:A", "tenant:1"} {
		t.Run("lose "+lose, func(t *testing.T) {
			r := redistest.New(t)
			l := newLocker(t, r)
			tokens := make(chan int64, 1)
			h := asynqfence.Wrap(asynq.HandlerFunc(func(ctx context.Context, _ *asynq.Task) error {
				token, _ := fencing.TokenFor(ctx, lose)
				tokens <- token
				<-ctx.Done() // the renewal finds the lock gone
				return fmt.Errorf("export: %w", context.Cause(ctx))
			}), l, tenantOf, withEntity(asynqfence.WithTTL(3*time.Second))...) // the loss is found a second in
			done := make(chan error, 1)
			go func() { done <- h.ProcessTask(t.Context(), task("tenant:1|A")) }()
			if err := l.ForceRelease(t.Context(), lose, <-tokens); err != nil {
				t.Fatal(err)
			}
			err := <-done
			if !errors.Is(err, fencing.ErrNotHeld) || asynqfence.IsBusy(err) || errors.Is(err, asynq.SkipRetry) {
				t.Fatalf("got %v, want an ordinary failure matching ErrNotHeld", err)
			}
			// The cause once from the handler and once from the Locker, as with one lock:
			// the lock nested in the other adds it no third time.
			if n := strings.Count(err.Error(), "renewal found the lock taken or expired"); n > 2 {
				t.Errorf("got %q, with the cause %d times, want at most 2", err, n)
			}
			if n := holders(t, l, "tenant:1") + holders(t, l, "export:A"); n != 0 {
				t.Fatalf("%d holders left, want both released", n)
			}
		})
	}
	t.Run("only one name", func(t *testing.T) {
		r := redistest.New(t)
		l := newLocker(t, r)
		for _, tc := range []struct{ payload, held string }{{"tenant:1|", "tenant:1"}, {"|A", "export:A"}} {
			err := asynqfence.Wrap(asynq.HandlerFunc(func(ctx context.Context, _ *asynq.Task) error {
				token, ok := fencing.TokenFromContext(ctx)
				got, _ := fencing.TokenFor(ctx, tc.held)
				if !ok || token != got || holders(t, l, "tenant:1")+holders(t, l, "export:A") != 1 {
					return fmt.Errorf("token %d (%v), want %s's, %d, and it alone held", token, ok, tc.held, got)
				}
				return nil
			}), l, tenantOf, withEntity()...).ProcessTask(t.Context(), task(tc.payload))
			if err != nil {
				t.Errorf("payload %q: %v", tc.payload, err)
			}
		}
	})
	t.Run("refused", func(t *testing.T) {
		r := redistest.New(t)
		l := newLocker(t, r)
		boom := errors.New("no export id")
		rec := &recorder{}
		for _, tc := range []struct {
			name string
			h    asynq.Handler
			want []error
			text string
		}{
			{"entity error", asynqfence.Wrap(rec, l, tenantOf, asynqfence.WithEntity(func(*asynq.Task) (string, error) { return "", boom })),
				[]error{boom, asynq.SkipRetry}, `asynqfence: entity of task "export": no export id`},
			{"same name", asynqfence.Wrap(rec, l, tenantOf, asynqfence.WithEntity(tenantOf)),
				[]error{fencing.ErrInvalid, asynq.SkipRetry}, `asynqfence: task "export" names "tenant:1" as its resource and its entity`},
			{"MiddlewareAll", asynqfence.MiddlewareAll(l, func(*asynq.Task) ([]string, error) { return []string{"a"}, nil },
				asynqfence.WithEntity(exportOf))(rec), []error{fencing.ErrInvalid, asynq.SkipRetry}, "asynqfence: WithEntity with MiddlewareAll"},
		} {
			err := tc.h.ProcessTask(t.Context(), task("tenant:1|A"))
			for _, want := range tc.want {
				if !errors.Is(err, want) {
					t.Errorf("%s: got %v, want it to match %v", tc.name, err, want)
				}
			}
			checkText(t, err, "asynqfence: ")
			if err != nil && !strings.HasPrefix(err.Error(), tc.text) {
				t.Errorf("%s: got %q, want it to start with %q", tc.name, err, tc.text)
			}
		}
		if rec.calls.Load() != 0 {
			t.Errorf("handler ran %d times, want 0", rec.calls.Load())
		}
	})
}

// checkBusy checks a busy task's error: busy, naming resource, with a RetryAfter in
// (low, high], and the Locker's text as it is.
func checkBusy(t *testing.T, err error, resource string, low, high time.Duration) {
	t.Helper()
	if !asynqfence.IsBusy(err) || !errors.Is(err, fencing.ErrNotAcquired) {
		t.Fatalf("got %v, want a busy error", err)
	}
	if b := (*fencing.BusyError)(nil); !errors.As(err, &b) || b.Resource != resource {
		t.Errorf("busy resource: got %v, want %q", err, resource)
	}
	if d, ok := fencing.RetryAfter(err); !ok || d <= low || d > high {
		t.Errorf("RetryAfter %v (%v), want (%v, %v]", d, ok, low, high)
	}
	checkText(t, err, "fencing: ")
}

// TestWrapEntityStall shows what the export's token fences: a worker holding a tenant's slot
// and an export's lock writes the export, then stalls past its leases (fencingtest.Stall); a
// second worker, with a Locker of its own, takes the export's lock and a slot, and writes the
// export with the export's next token; the first worker's late write is refused by the store
// (store.Memory, keyed by the export), and its task fails as one that lost its lock.
func TestWrapEntityStall(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	var ledger store.Memory
	var mu sync.Mutex
	value := map[string]string{}
	write := func(ctx context.Context, who string) error {
		token, _ := fencing.TokenFromContext(ctx) // the export's
		return ledger.Write("export:A", token, func() error {
			mu.Lock()
			defer mu.Unlock()
			value["export:A"] = who
			return nil
		})
	}
	stalled, secondDone := make(chan struct{}), make(chan struct{})
	first := asynqfence.Wrap(asynq.HandlerFunc(func(ctx context.Context, _ *asynq.Task) error {
		if err := write(ctx, "first"); err != nil {
			return err
		}
		close(stalled)
		if err := fencingtest.Stall(ctx); err != nil { // returns once the second worker holds a lock
			return err
		}
		<-secondDone
		return write(ctx, "first, late")
	}), newLocker(t, r), tenantOf, withEntity()...)
	second := asynqfence.Wrap(asynq.HandlerFunc(func(ctx context.Context, _ *asynq.Task) error {
		return write(ctx, "second")
	}), newLocker(t, r), tenantOf, withEntity(asynqfence.WithLockOptions(fencing.WithMaxWait(10*time.Second)))...)

	task := asynq.NewTask("export", []byte("tenant:1|A"))
	firstErr := make(chan error, 1)
	go func() { firstErr <- first.ProcessTask(t.Context(), task) }()
	<-stalled
	if err := second.ProcessTask(t.Context(), task); err != nil {
		t.Fatalf("second worker: %v", err)
	}
	close(secondDone)
	err := <-firstErr
	var stale *store.StaleTokenError
	if !errors.As(err, &stale) || !errors.Is(err, fencing.ErrNotHeld) || asynqfence.IsBusy(err) {
		t.Fatalf("first worker: got %v, want the store's refusal, matching ErrNotHeld", err)
	}
	if stale.Resource != "export:A" || stale.Token >= stale.Mark {
		t.Errorf("refusal %+v, want the export's token below its mark", stale)
	}
	mu.Lock()
	defer mu.Unlock()
	if got := value["export:A"]; got != "second" {
		t.Errorf("the export holds %q, want the second worker's write", got)
	}
	l := newLocker(t, r)
	if n := holders(t, l, "tenant:1") + holders(t, l, "export:A"); n != 0 {
		t.Errorf("%d holders left, want none", n)
	}
}

// TestServerEntity runs two workers (two asynq.Servers, each with a Locker of its own) on one
// queue, with WithLimit(2) per tenant and WithEntity per export: export A is enqueued twice
// and export B once, for one tenant. The second task for A is busy while the first runs, and
// retried uncounted; B runs beside the first A, in the tenant's second slot; the second A
// runs once the first is done, with a higher export token. At most one task per export and two
// per tenant ran at once, and every task completed with no failure and no retry counted.
func TestServerEntity(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	gate := make(chan struct{})
	type start struct {
		id, export string
		token      int64
	}
	starts := make(chan start, 16)
	var mu sync.Mutex
	running := map[string]int{} // by export, and "tenant"
	most := map[string]int{}
	work := asynq.HandlerFunc(func(ctx context.Context, task *asynq.Task) error {
		export, _ := exportOf(task)
		mu.Lock()
		for _, k := range []string{export, "tenant"} {
			running[k]++
			most[k] = max(most[k], running[k])
		}
		mu.Unlock()
		defer func() {
			mu.Lock()
			running[export]--
			running["tenant"]--
			mu.Unlock()
		}()
		id, _ := asynq.GetTaskID(ctx)
		token, _ := fencing.TokenFromContext(ctx)
		starts <- start{id, export, token}
		select {
		case <-gate:
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	})
	// A busy task comes back after a second, not after the holder's 30 s lease.
	cfg := asynq.Config{Concurrency: 2, RetryDelayFunc: func(int, error, *asynq.Task) time.Duration { return time.Second }}
	h.serve(t, asynqfence.Wrap(work, h.locker, tenantOf, withEntity()...), cfg)
	h.serve(t, asynqfence.Wrap(work, newLocker(t, h.r), tenantOf, withEntity()...), cfg)
	next := func() start {
		t.Helper()
		select {
		case s := <-starts:
			return s
		case <-time.After(20 * time.Second):
			t.Fatal("timed out waiting for a task to start")
			return start{}
		}
	}

	a1 := h.enqueue(t, "export", "tenant:1|A", asynq.MaxRetry(3))
	first := next()
	if first.id != a1 {
		t.Fatalf("got %+v, want the first A", first)
	}
	a2 := h.enqueue(t, "export", "tenant:1|A", asynq.MaxRetry(3))
	b := h.enqueue(t, "export", "tenant:1|B", asynq.MaxRetry(3))
	if s := next(); s.id != b {
		t.Fatalf("got %+v, want B, in the tenant's second slot", s)
	}
	// The second A found its export busy: it waits in the retry set, uncounted.
	info := h.waitState(t, a2, asynq.TaskStateRetry)
	if info.Retried != 0 || !strings.Contains(info.LastErr, `"export:A"`) {
		t.Fatalf("second A: retried %d, last error %q; want 0 and the export's busy error", info.Retried, info.LastErr)
	}
	close(gate)
	if s := next(); s.id != a2 || s.token <= first.token {
		t.Fatalf("got %+v, want the second A with an export token above %d", s, first.token)
	}
	for _, id := range []string{a1, a2, b} {
		if info := h.waitState(t, id, asynq.TaskStateCompleted); info.Retried != 0 {
			t.Errorf("task %s: retried %d times, want 0", id, info.Retried)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if most["export:A"] != 1 || most["export:B"] != 1 || most["tenant"] != 2 {
		t.Errorf("at most %v at once, want 1 per export and 2 for the tenant", most)
	}
	h.checkStats(t, 3, 0)
	if n := holders(t, h.locker, "tenant:1") + holders(t, h.locker, "export:A") + holders(t, h.locker, "export:B"); n != 0 {
		t.Errorf("%d holders left, want none", n)
	}
}
