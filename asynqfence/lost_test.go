package asynqfence_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/fencekit/fencekit/asynqfence"
	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/internal/testkit/redistest"
	"github.com/fencekit/fencekit/store"
)

// TestWrapStaleWrite checks that a handler whose write a fenced store refused (an error
// matching store.ErrStaleToken) is treated as one that lost its lock: its error also matches
// fencing.ErrNotHeld, as after a lost lease, and stays an ordinary failure (retried, counted,
// neither busy nor SkipRetry nor RevokeTask), for Wrap and MiddlewareAll alike. Other errors,
// and errors already matching ErrNotHeld, come back as they are.
func TestWrapStaleWrite(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	l := newLocker(t, r)
	stale := &store.StaleTokenError{Resource: "acct", Token: 3, Mark: 4}
	notHeld := fmt.Errorf("write: %w", fencing.ErrNotHeld)
	boom := errors.New("boom")
	wrap := func(h asynq.Handler, opts ...asynqfence.Option) asynq.Handler {
		return asynqfence.Wrap(h, l, byPayload, opts...)
	}
	all := func(h asynq.Handler, opts ...asynqfence.Option) asynq.Handler {
		return asynqfence.MiddlewareAll(l, func(t *asynq.Task) ([]string, error) {
			return []string{string(t.Payload()), "other"}, nil
		}, opts...)(h)
	}
	for _, tc := range []struct {
		name    string
		build   func(h asynq.Handler, opts ...asynqfence.Option) asynq.Handler
		opts    []asynqfence.Option
		handler error
		lost    bool // the error is made to match ErrNotHeld; otherwise it comes back as it is
	}{
		{"wrapped *StaleTokenError", wrap, nil, fmt.Errorf("write: %w", stale), true},
		{"bare ErrStaleToken", wrap, nil, store.ErrStaleToken, true},
		{"joined", wrap, nil, errors.Join(boom, store.ErrStaleToken), true},
		{"with WithDropDuplicates", wrap, []asynqfence.Option{asynqfence.WithDropDuplicates()}, fmt.Errorf("write: %w", stale), true},
		{"MiddlewareAll", all, nil, fmt.Errorf("write: %w", stale), true},
		{"formatted with %v: not a chain", wrap, nil, fmt.Errorf("write: %v", stale), false},
		{"already ErrNotHeld", wrap, nil, notHeld, false},
		{"another error", wrap, nil, boom, false},
		{"MiddlewareAll, another error", all, nil, boom, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := tc.build(asynq.HandlerFunc(func(context.Context, *asynq.Task) error { return tc.handler }), tc.opts...)
			err := h.ProcessTask(t.Context(), asynq.NewTask("deposit", []byte("acct")))
			if !tc.lost {
				if err != tc.handler { //nolint:errorlint // the very value must come through
					t.Fatalf("got %v, want the handler's error itself", err)
				}
				return
			}
			if !errors.Is(err, fencing.ErrNotHeld) || !errors.Is(err, tc.handler) {
				t.Errorf("got %v, want an error matching fencing.ErrNotHeld and the handler's", err)
			}
			if asynqfence.IsBusy(err) || errors.Is(err, asynq.SkipRetry) || errors.Is(err, asynq.RevokeTask) ||
				!asynqfence.IsFailure(nil)(err) {
				t.Errorf("got %v, want an ordinary failure: not busy, SkipRetry or RevokeTask", err)
			}
			// The handler's own text, unchanged: the adapter adds the match, not words.
			if got, want := err.Error(), tc.handler.Error(); got != want {
				t.Errorf("got text %q, want the handler's, %q", got, want)
			}
		})
	}
	if keys := r.Client.Keys(t.Context(), r.Prefix+"*:lock").Val(); len(keys) != 0 {
		t.Errorf("lock keys left: %q", keys)
	}
}

// errorLog is an asynq.ErrorHandler that keeps the errors it is given.
type errorLog struct {
	mu   sync.Mutex
	errs []error
}

func (l *errorLog) HandleError(_ context.Context, _ *asynq.Task, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.errs = append(l.errs, err)
}

func (l *errorLog) list() []error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]error(nil), l.errs...)
}

// TestServerStaleWriteIsLostLock runs, on a real asynq.Server with ServerConfig, a task whose
// first attempt's write a fenced store refuses while its lock is still held: the attempt fails
// as after a lost lock (an ordinary failure: Retried goes to 1, the queue counts a failure,
// the ErrorHandler gets an error matching fencing.ErrNotHeld and store.ErrStaleToken), and the
// retry runs under a new lock and completes.
func TestServerStaleWriteIsLostLock(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	errs := &errorLog{}
	var ledger store.Memory
	var mu sync.Mutex
	attempts := 0
	work := asynq.HandlerFunc(func(ctx context.Context, task *asynq.Task) error {
		token, _ := fencing.TokenFromContext(ctx)
		mu.Lock()
		attempts++
		first := attempts == 1
		mu.Unlock()
		if first {
			// A newer holder's token has passed this one (a lease that lapsed and was taken
			// over, which no renewal has noticed yet): the store refuses the write.
			if err := ledger.Admit("acct", token+1); err != nil {
				return err
			}
		}
		return ledger.Write("acct", token, func() error { return nil })
	})
	cfg := asynqfence.ServerConfig(asynq.Config{
		ErrorHandler:   errs,
		RetryDelayFunc: func(int, error, *asynq.Task) time.Duration { return time.Second },
	})
	h.serve(t, asynqfence.Wrap(work, h.locker, accountOf), cfg)
	id := h.enqueue(t, "deposit", "acct|1", asynq.MaxRetry(1))

	info := h.waitState(t, id, asynq.TaskStateCompleted)
	if info.Retried != 1 {
		t.Errorf("got Retried %d, want 1: the stale attempt counts as a failure", info.Retried)
	}
	got := errs.list()
	if len(got) != 1 || !errors.Is(got[0], fencing.ErrNotHeld) || !errors.Is(got[0], store.ErrStaleToken) ||
		asynqfence.IsBusy(got[0]) {
		t.Errorf("ErrorHandler got %v, want one error matching fencing.ErrNotHeld and store.ErrStaleToken", got)
	}
	h.checkStats(t, 2, 1)
	mu.Lock()
	defer mu.Unlock()
	if attempts != 2 {
		t.Errorf("handler ran %d times, want 2", attempts)
	}
}
