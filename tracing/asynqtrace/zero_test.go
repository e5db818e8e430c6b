package asynqtrace_test

import (
	"context"
	"testing"

	"github.com/hibiken/asynq"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/fencekit/fencekit/asynqfence"
	"github.com/fencekit/fencekit/tracing/asynqtrace"
)

// TestZeroValues builds the middleware and the scheduler hooks from the zero values of the
// package's one exported type, Option (nil, and a nil provider), and runs them with zero
// arguments: a task of no type, a zero EnqueueEvent, End without Start. None panics.
func TestZeroValues(t *testing.T) {
	noopTP := asynqtrace.WithTracerProvider(noop.NewTracerProvider())
	for _, tc := range []struct {
		name string
		opts []asynqtrace.Option
	}{
		{"nil Option", []asynqtrace.Option{nil, noopTP}},
		{"nil provider", []asynqtrace.Option{asynqtrace.WithTracerProvider(nil), noopTP}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				if p := recover(); p != nil {
					t.Errorf("panicked: %v", p)
				}
			}()
			h := asynqtrace.Middleware(tc.opts...)(asynq.HandlerFunc(func(context.Context, *asynq.Task) error { return nil }))
			if err := h.ProcessTask(context.Background(), asynq.NewTask("", nil)); err != nil {
				t.Errorf("got %v, want nil", err)
			}
			hooks := asynqtrace.SchedulerHooks(tc.opts...)
			hooks.End(context.Background(), asynqfence.EnqueueEvent{})
			hooks.End(hooks.Start(context.Background(), asynqfence.EnqueueEvent{}), asynqfence.EnqueueEvent{})
		})
	}
}
