package asynqfence_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/fencekit/fencekit/asynqfence"
	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/fencing/observe"
	"github.com/fencekit/fencekit/internal/testkit/redistest"
)

func newLocker(t testing.TB, r *redistest.Redis, opts ...fencing.Option) *fencing.Locker {
	t.Helper()
	l := fencing.New(r.Client, append([]fencing.Option{fencing.WithPrefix(r.Prefix)}, opts...)...)
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// byPayload locks the resource named by the task's payload, and nothing for an empty payload.
func byPayload(t *asynq.Task) (string, error) { return string(t.Payload()), nil }

// recorder is a handler that records the token in its context.
type recorder struct {
	calls atomic.Int32
	token atomic.Int64 // -1: no token
	err   error
}

func (h *recorder) ProcessTask(ctx context.Context, _ *asynq.Task) error {
	h.calls.Add(1)
	tok, ok := fencing.TokenFromContext(ctx)
	if !ok {
		tok = -1
	}
	h.token.Store(tok)
	return h.err
}

func TestWrapRunsUnderLock(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	l := newLocker(t, r)
	ctx := t.Context()
	rec := &recorder{}
	h := asynqfence.Wrap(rec, l, byPayload)

	for want := int64(1); want <= 2; want++ {
		if err := h.ProcessTask(ctx, asynq.NewTask("job", []byte("acct-1"))); err != nil {
			t.Fatalf("ProcessTask: %v", err)
		}
		if got := rec.token.Load(); got != want {
			t.Fatalf("got token %d in the handler's context, want %d", got, want)
		}
	}
	// Released after each task: the lock is free again.
	lock, err := l.TryAcquire(ctx, "acct-1")
	if err != nil {
		t.Fatalf("TryAcquire after the tasks: %v", err)
	}
	_ = lock.Release(ctx)
}

func TestWrapNoLockPassesThrough(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	l := newLocker(t, r)
	rec := &recorder{err: asynq.SkipRetry}
	h := asynqfence.Wrap(rec, l, byPayload)

	err := h.ProcessTask(t.Context(), asynq.NewTask("job", nil))
	if !errors.Is(err, asynq.SkipRetry) || err.Error() != asynq.SkipRetry.Error() {
		t.Fatalf("got %v, want the handler's own error unchanged", err)
	}
	if rec.calls.Load() != 1 || rec.token.Load() != -1 {
		t.Fatalf("got %d calls with token %d, want 1 call without a token", rec.calls.Load(), rec.token.Load())
	}
}

func TestWrapBusy(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		opts   []asynqfence.Option
		revoke bool
	}{
		{name: "retry"},
		{name: "drop duplicates", opts: []asynqfence.Option{asynqfence.WithDropDuplicates()}, revoke: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := redistest.New(t)
			l := newLocker(t, r)
			ctx := t.Context()
			held, err := l.TryAcquire(ctx, "acct-1", fencing.WithTTL(20*time.Second))
			if err != nil {
				t.Fatalf("TryAcquire: %v", err)
			}
			defer held.Release(context.Background())
			rec := &recorder{}
			h := asynqfence.Wrap(rec, l, byPayload, tt.opts...)

			err = h.ProcessTask(ctx, asynq.NewTask("job", []byte("acct-1")))
			if !asynqfence.IsBusy(err) || !errors.Is(err, fencing.ErrNotAcquired) {
				t.Fatalf("got %v, want a busy error matching ErrNotAcquired", err)
			}
			if got := errors.Is(err, asynq.RevokeTask); got != tt.revoke {
				t.Fatalf("errors.Is(err, RevokeTask): got %v, want %v", got, tt.revoke)
			}
			if errors.Is(err, asynq.SkipRetry) {
				t.Fatalf("got %v, want no SkipRetry", err)
			}
			if d, ok := fencing.RetryAfter(err); !ok || d <= 0 || d > 20*time.Second {
				t.Fatalf("RetryAfter: got %v %v, want (0, 20s]", d, ok)
			}
			// The Locker's busy error as it is, naming the resource; RevokeTask joined after it.
			checkText(t, err, "fencing: ")
			if !strings.Contains(err.Error(), `"acct-1"`) {
				t.Fatalf("got message %q, want it to name the resource", err)
			}
			if n := rec.calls.Load(); n != 0 {
				t.Fatalf("handler ran %d times, want 0", n)
			}
		})
	}
}

func TestWrapResourceError(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	l := newLocker(t, r)
	bad := errors.New("no account in payload")
	rec := &recorder{}
	h := asynqfence.Wrap(rec, l, func(*asynq.Task) (string, error) { return "", bad })

	err := h.ProcessTask(t.Context(), asynq.NewTask("job", []byte("{")))
	if !errors.Is(err, bad) || !errors.Is(err, asynq.SkipRetry) || asynqfence.IsBusy(err) {
		t.Fatalf("got %v, want the ResourceFunc's error with SkipRetry, not busy", err)
	}
	if n := rec.calls.Load(); n != 0 {
		t.Fatalf("handler ran %d times, want 0", n)
	}
}

// TestWrapHandlerErrors checks that the handler's errors come back as they are: an inner
// ErrNotAcquired from the handler's own locking is not the adapter's busy signal.
func TestWrapHandlerErrors(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	l := newLocker(t, r)
	inner, err := l.TryAcquire(t.Context(), "inner")
	if err != nil {
		t.Fatalf("TryAcquire: %v", err)
	}
	defer inner.Release(context.Background())
	h := asynqfence.Wrap(asynq.HandlerFunc(func(ctx context.Context, _ *asynq.Task) error {
		_, err := l.TryAcquire(ctx, "inner")
		return err
	}), l, byPayload)

	err = h.ProcessTask(t.Context(), asynq.NewTask("job", []byte("outer")))
	if !errors.Is(err, fencing.ErrNotAcquired) || asynqfence.IsBusy(err) {
		t.Fatalf("got %v (busy %v), want the handler's ErrNotAcquired, not busy", err, asynqfence.IsBusy(err))
	}
}

func TestWrapUnreachableRedis(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	if r.Mini == nil {
		t.Skip("needs miniredis to inject the fault")
	}
	l := newLocker(t, r)
	r.Mini.SetError("LOADING Redis is loading the dataset in memory")
	rec := &recorder{}
	err := asynqfence.Wrap(rec, l, byPayload).ProcessTask(t.Context(), asynq.NewTask("job", []byte("a")))
	if err == nil || asynqfence.IsBusy(err) || errors.Is(err, asynq.SkipRetry) || !strings.Contains(err.Error(), "LOADING") {
		t.Fatalf("got %v, want an ordinary failure carrying the Redis error", err)
	}
	if n := rec.calls.Load(); n != 0 {
		t.Fatalf("handler ran %d times, want 0", n)
	}
}

func TestWrapInvalid(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	l := newLocker(t, r)
	rec := &recorder{}
	tests := []struct {
		name string
		h    asynq.Handler
		task *asynq.Task
	}{
		{"nil locker", asynqfence.Wrap(rec, nil, byPayload), asynq.NewTask("job", []byte("a"))},
		{"nil resource func", asynqfence.Wrap(rec, l, nil), asynq.NewTask("job", []byte("a"))},
		{"nil handler", asynqfence.Wrap(nil, l, byPayload), asynq.NewTask("job", []byte("a"))},
		{"nil task", asynqfence.Wrap(rec, l, byPayload), nil},
		{"ttl too short", asynqfence.Wrap(rec, l, byPayload, asynqfence.WithTTL(0)), asynq.NewTask("job", []byte("a"))},
		{"ttl too long", asynqfence.Wrap(rec, l, byPayload, asynqfence.WithTTL(fencing.MaxTTL+1)), asynq.NewTask("job", []byte("a"))},
		{"resource too long", asynqfence.Wrap(rec, l, byPayload), asynq.NewTask("job", make([]byte, fencing.MaxResourceLen+1))},
		{"nil middleware handler", asynqfence.Middleware(l, byPayload)(nil), asynq.NewTask("job", []byte("a"))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.h.ProcessTask(t.Context(), tt.task)
			if !errors.Is(err, fencing.ErrInvalid) || !errors.Is(err, asynq.SkipRetry) || asynqfence.IsBusy(err) {
				t.Fatalf("got %v, want an error wrapping ErrInvalid and asynq.SkipRetry", err)
			}
			// The Locker refuses the long name itself: its error, as it is; the others are
			// the adapter's own.
			want := "asynqfence: "
			if tt.name == "resource too long" {
				want = "fencing: "
			}
			checkText(t, err, want)
		})
	}
	if n := rec.calls.Load(); n != 0 {
		t.Fatalf("handler ran %d times, want 0", n)
	}
}

// TestWrapTTL checks that the lease is the Locker's TTL unless WithTTL or WithLockOptions
// says otherwise, whatever the task's deadline.
func TestWrapTTL(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		lockerOpts []fencing.Option
		deadline   time.Duration // 0: no deadline
		opts       []asynqfence.Option
		want       time.Duration
	}{
		{name: "Locker's default", want: fencing.DefaultTTL},
		{name: "Locker's default, long deadline", deadline: 30 * time.Minute, want: fencing.DefaultTTL},
		{name: "Locker's default, short deadline", deadline: 10 * time.Second, want: fencing.DefaultTTL},
		{name: "Locker's TTL", lockerOpts: []fencing.Option{fencing.WithTTL(12 * time.Second)}, want: 12 * time.Second},
		{
			name: "Locker's TTL, deadline", lockerOpts: []fencing.Option{fencing.WithTTL(45 * time.Second)},
			deadline: 10 * time.Minute, want: 45 * time.Second,
		},
		{
			name: "WithTTL over the Locker's", lockerOpts: []fencing.Option{fencing.WithTTL(12 * time.Second)},
			opts: []asynqfence.Option{asynqfence.WithTTL(7 * time.Second)}, want: 7 * time.Second,
		},
		{
			name: "lock options last", deadline: 30 * time.Minute, want: 5 * time.Second,
			opts: []asynqfence.Option{asynqfence.WithTTL(7 * time.Second), asynqfence.WithLockOptions(fencing.WithTTL(5 * time.Second))},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := redistest.New(t)
			l := newLocker(t, r, tt.lockerOpts...)
			var got time.Duration
			h := asynqfence.Wrap(asynq.HandlerFunc(func(ctx context.Context, _ *asynq.Task) error {
				var err error
				got, err = r.Client.PTTL(ctx, r.Prefix+"{acct}:lock").Result()
				return err
			}), l, byPayload, tt.opts...)
			ctx := t.Context()
			if tt.deadline > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tt.deadline)
				defer cancel()
			}
			if err := h.ProcessTask(ctx, asynq.NewTask("job", []byte("acct"))); err != nil {
				t.Fatalf("ProcessTask: %v", err)
			}
			if got > tt.want || got < tt.want-500*time.Millisecond {
				t.Fatalf("got lease %v, want about %v", got, tt.want)
			}
		})
	}
}

// TestWrapLockerErr checks that a Locker that can never work, or is closed, is refused where
// the adapter is built: its Err is the error of every task, with SkipRetry, and neither the
// handler nor Redis is reached.
func TestWrapLockerErr(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		build func(t *testing.T, r *redistest.Redis) *fencing.Locker
		want  error
	}{
		{
			name: "counter expiry below the TTL",
			build: func(t *testing.T, r *redistest.Redis) *fencing.Locker {
				return newLocker(t, r, fencing.WithCounterExpiry(time.Second))
			},
			want: fencing.ErrInvalid,
		},
		{
			name: "closed",
			build: func(t *testing.T, r *redistest.Redis) *fencing.Locker {
				l := newLocker(t, r)
				_ = l.Close()
				return l
			},
			want: fencing.ErrClosed,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := redistest.New(t)
			l := tt.build(t, r)
			if l.Err() == nil {
				t.Fatal("Locker.Err() = nil, want an error")
			}
			ran := false
			next := asynq.HandlerFunc(func(context.Context, *asynq.Task) error { ran = true; return nil })
			handlers := map[string]asynq.Handler{
				"Wrap":       asynqfence.Wrap(next, l, byPayload),
				"Middleware": asynqfence.Middleware(l, byPayload)(next),
			}
			for name, h := range handlers {
				err := h.ProcessTask(t.Context(), asynq.NewTask("job", []byte("acct")))
				if !errors.Is(err, tt.want) || !errors.Is(err, asynq.SkipRetry) {
					t.Errorf("%s: got %v, want an error matching %v and asynq.SkipRetry", name, err, tt.want)
				}
				checkText(t, err, "fencing: ") // the Locker's Err, as it is, with SkipRetry
			}
			if ran {
				t.Error("the handler ran, want it refused")
			}
			if n, err := r.Client.Exists(t.Context(), r.Prefix+"{acct}:lock").Result(); err != nil || n != 0 {
				t.Errorf("lock key exists = %d, %v; want 0", n, err)
			}
		})
	}
}

// TestWrapLockLost checks that losing the lock cancels the handler's context with a cause
// matching ErrNotHeld, and that the task then fails as an ordinary failure.
func TestWrapLockLost(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	l := newLocker(t, r)
	started := make(chan struct{})
	var cause error
	h := asynqfence.Wrap(asynq.HandlerFunc(func(ctx context.Context, _ *asynq.Task) error {
		close(started)
		select {
		case <-ctx.Done():
			cause = context.Cause(ctx)
			return cause
		case <-time.After(10 * time.Second):
			return errors.New("context not cancelled within 10s of losing the lock")
		}
	}), l, byPayload, asynqfence.WithTTL(time.Second))

	errc := make(chan error, 1)
	go func() { errc <- h.ProcessTask(t.Context(), asynq.NewTask("job", []byte("acct"))) }()
	<-started
	// The lease ends as if the worker had paused past it: the lock key disappears.
	if err := r.Client.Del(t.Context(), r.Prefix+"{acct}:lock").Err(); err != nil {
		t.Fatalf("DEL: %v", err)
	}
	err := <-errc
	if !errors.Is(cause, fencing.ErrNotHeld) {
		t.Fatalf("got cause %v, want ErrNotHeld", cause)
	}
	if !errors.Is(err, fencing.ErrNotHeld) || asynqfence.IsBusy(err) {
		t.Fatalf("got %v, want an ordinary failure matching ErrNotHeld", err)
	}
}

// TestWrapSucceededStaysSucceeded checks that a handler that returned nil is not turned into
// a failure (and so run again) by what happened to its lease afterwards.
func TestWrapSucceededStaysSucceeded(t *testing.T) {
	t.Parallel()
	t.Run("lease lost", func(t *testing.T) {
		r := redistest.New(t)
		l := newLocker(t, r)
		var lost atomic.Int32
		h := asynqfence.Wrap(asynq.HandlerFunc(func(ctx context.Context, _ *asynq.Task) error {
			if err := r.Client.Del(ctx, r.Prefix+"{acct}:lock").Err(); err != nil {
				return err
			}
			<-ctx.Done() // the renewal notices; the handler had already written
			return nil
		}), l, byPayload, asynqfence.WithTTL(time.Second), asynqfence.WithLockOptions(fencing.WithHooks(observe.Hooks{
			Lost: func(context.Context, observe.Event) { lost.Add(1) },
		})))
		if err := h.ProcessTask(t.Context(), asynq.NewTask("job", []byte("acct"))); err != nil {
			t.Fatalf("got %v, want nil", err)
		}
		if n := lost.Load(); n != 1 {
			t.Fatalf("Lost hook ran %d times, want 1", n)
		}
	})
	t.Run("release fails", func(t *testing.T) {
		r := redistest.New(t)
		if r.Mini == nil {
			t.Skip("needs miniredis to inject the fault")
		}
		l := newLocker(t, r)
		h := asynqfence.Wrap(asynq.HandlerFunc(func(context.Context, *asynq.Task) error {
			r.Mini.SetError("LOADING Redis is loading the dataset in memory")
			return nil
		}), l, byPayload)
		err := h.ProcessTask(t.Context(), asynq.NewTask("job", []byte("acct")))
		r.Mini.SetError("")
		if err != nil {
			t.Fatalf("got %v, want nil", err)
		}
	})
}

// TestBusyErrorText checks that a busy error, also one that ended a wait with a deadline, is
// the Locker's error as it is (one line, one "fencing: " prefix) and still matches what it
// wraps.
func TestBusyErrorText(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	l := newLocker(t, r)
	held, err := l.TryAcquire(t.Context(), "busy")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(context.Background())
	h := asynqfence.Wrap(&recorder{}, l, byPayload, asynqfence.WithLockOptions(fencing.WithMaxWait(20*time.Millisecond)))
	err = h.ProcessTask(t.Context(), asynq.NewTask("job", []byte("busy")))
	if !asynqfence.IsBusy(err) || !errors.Is(err, fencing.ErrNotAcquired) {
		t.Fatalf("got %v, want a busy error", err)
	}
	checkText(t, err, "fencing: ")
}
