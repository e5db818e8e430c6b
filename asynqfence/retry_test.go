package asynqfence_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/fencekit/fencekit/asynqfence"
	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/internal/testkit/redistest"
)

// busyErr returns the error a wrapped handler returns for a resource held with ttl.
func busyErr(t *testing.T, ttl time.Duration, opts ...asynqfence.Option) error {
	t.Helper()
	r := redistest.New(t)
	l := newLocker(t, r)
	held, err := l.TryAcquire(t.Context(), "acct", fencing.WithTTL(ttl))
	if err != nil {
		t.Fatalf("TryAcquire: %v", err)
	}
	t.Cleanup(func() { _ = held.Release(context.Background()) })
	err = asynqfence.Wrap(&recorder{}, l, byPayload, opts...).ProcessTask(t.Context(), asynq.NewTask("job", []byte("acct")))
	if !asynqfence.IsBusy(err) {
		t.Fatalf("got %v, want a busy error", err)
	}
	return err
}

func TestIsFailure(t *testing.T) {
	t.Parallel()
	busy := busyErr(t, 10*time.Second)
	other := errors.New("boom")
	never := func(error) bool { return false }
	tests := []struct {
		name string
		next func(error) bool
		err  error
		want bool
	}{
		{"busy", nil, busy, false},
		{"busy, next says failure", func(error) bool { return true }, busy, false},
		{"other", nil, other, true},
		{"other, next decides", never, other, false},
		{"nil", nil, nil, false},
		{"lost lock", nil, errors.Join(other, fencing.ErrNotHeld), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := asynqfence.IsFailure(tt.next)(tt.err); got != tt.want {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestRetryDelay(t *testing.T) {
	t.Parallel()
	task := asynq.NewTask("job", []byte("acct"))
	t.Run("busy", func(t *testing.T) {
		err := busyErr(t, 8*time.Second)
		ra, _ := fencing.RetryAfter(err)
		called := false
		f := asynqfence.RetryDelay(func(int, error, *asynq.Task) time.Duration { called = true; return time.Hour })
		seen := make(map[time.Duration]bool)
		for range 50 {
			d := f(3, err, task)
			if d < ra || d >= ra+4*time.Second {
				t.Fatalf("got delay %v, want between the holder's %v and 4s more", d, ra)
			}
			seen[d] = true
		}
		if called || len(seen) < 2 {
			t.Fatalf("got next called %v and %d distinct delays, want next not called and jitter", called, len(seen))
		}
	})
	t.Run("busy, short lease", func(t *testing.T) {
		err := busyErr(t, 500*time.Millisecond)
		seconds := make(map[time.Duration]bool)
		for range 200 {
			d := asynqfence.RetryDelay(nil)(0, err, task)
			if d < time.Second || d >= 5*time.Second {
				t.Fatalf("got delay %v, want at least 1s, below 5s", d)
			}
			seconds[d.Truncate(time.Second)] = true
		}
		if len(seconds) != 4 {
			t.Fatalf("got delays in %d distinct whole seconds, want 4 (1s to 4s)", len(seconds))
		}
	})
	t.Run("busy, long lease", func(t *testing.T) {
		err := busyErr(t, 20*time.Second)
		ra, _ := fencing.RetryAfter(err)
		for range 50 {
			if d := asynqfence.RetryDelay(nil)(0, err, task); d < ra || d >= ra+ra/4 {
				t.Fatalf("got delay %v, want between the holder's %v and a quarter more", d, ra)
			}
		}
	})
	t.Run("dropped duplicate", func(t *testing.T) {
		err := busyErr(t, 8*time.Second, asynqfence.WithDropDuplicates())
		if d := asynqfence.RetryDelay(nil)(0, err, task); d < 8*time.Second-time.Second || d >= 12*time.Second {
			t.Fatalf("got delay %v, want 8s to 12s", d)
		}
	})
	t.Run("other", func(t *testing.T) {
		other := errors.New("boom")
		var gotN int
		var gotErr error
		f := asynqfence.RetryDelay(func(n int, err error, _ *asynq.Task) time.Duration { gotN, gotErr = n, err; return time.Minute })
		if d := f(2, other, task); d != time.Minute || gotN != 2 || !errors.Is(gotErr, other) {
			t.Fatalf("got %v from next(%d, %v), want next's 1m for (2, boom)", d, gotN, gotErr)
		}
	})
	t.Run("other, default", func(t *testing.T) {
		// asynq.DefaultRetryDelayFunc(0, …): 15s plus up to 29s.
		if d := asynqfence.RetryDelay(nil)(0, errors.New("boom"), task); d < 15*time.Second || d > 44*time.Second {
			t.Fatalf("got delay %v, want Asynq's default (15s to 44s)", d)
		}
	})
}
