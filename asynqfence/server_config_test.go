package asynqfence_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/fencekit/fencekit/asynqfence"
)

func TestServerConfig(t *testing.T) {
	t.Parallel()
	busy := busyErr(t, 10*time.Second)
	other := errors.New("boom")
	task := asynq.NewTask("job", nil)
	var reported []error
	cfg := asynqfence.ServerConfig(asynq.Config{
		Concurrency:    3,
		IsFailure:      func(err error) bool { return !errors.Is(err, other) },
		RetryDelayFunc: func(int, error, *asynq.Task) time.Duration { return time.Minute },
		ErrorHandler: asynq.ErrorHandlerFunc(func(_ context.Context, _ *asynq.Task, err error) {
			reported = append(reported, err)
		}),
	})
	if cfg.Concurrency != 3 {
		t.Errorf("Concurrency = %d, want 3 kept", cfg.Concurrency)
	}
	if cfg.DelayedTaskCheckInterval != time.Second {
		t.Errorf("DelayedTaskCheckInterval = %v, want 1s", cfg.DelayedTaskCheckInterval)
	}
	if cfg.IsFailure(busy) || cfg.IsFailure(other) || !cfg.IsFailure(errors.New("x")) {
		t.Error("IsFailure: want busy no failure, then the chained function's answers")
	}
	if d := cfg.RetryDelayFunc(0, other, task); d != time.Minute {
		t.Errorf("RetryDelayFunc(other) = %v, want the chained 1m", d)
	}
	if d := cfg.RetryDelayFunc(0, busy, task); d < 5*time.Second || d > 15*time.Second {
		t.Errorf("RetryDelayFunc(busy) = %v, want about the holder's 10s", d)
	}
	cfg.ErrorHandler.HandleError(t.Context(), task, busy)
	cfg.ErrorHandler.HandleError(t.Context(), task, other)
	if len(reported) != 1 || !errors.Is(reported[0], other) {
		t.Errorf("ErrorHandler passed on %v, want only boom", reported)
	}

	// Nothing to chain: Asynq's defaults behind the adapter's, and a set interval is kept.
	cfg = asynqfence.ServerConfig(asynq.Config{DelayedTaskCheckInterval: 3 * time.Second})
	if cfg.DelayedTaskCheckInterval != 3*time.Second {
		t.Errorf("DelayedTaskCheckInterval = %v, want the 3s set", cfg.DelayedTaskCheckInterval)
	}
	if cfg.IsFailure(busy) || !cfg.IsFailure(other) {
		t.Error("IsFailure without next: want busy no failure, other a failure")
	}
	cfg.ErrorHandler.HandleError(t.Context(), task, other) // no handler to call: no panic
}
