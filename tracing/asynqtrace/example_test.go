package asynqtrace_test

import (
	"context"
	"fmt"

	"github.com/hibiken/asynq"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/fencekit/fencekit/tracing/asynqtrace"
)

// Use the job span before asynqfence.Middleware, so that the lock spans are its children.
// Outside an Asynq server (as here) there is no queue, so the span is named "process".
func ExampleMiddleware() {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	mux := asynq.NewServeMux()
	mux.Use(asynqtrace.Middleware(asynqtrace.WithTracerProvider(tp)))
	// mux.Use(asynqfence.Middleware(locker, resource))
	mux.HandleFunc("deposit", func(context.Context, *asynq.Task) error { return nil })

	_ = mux.ProcessTask(context.Background(), asynq.NewTask("deposit", nil))
	for _, s := range sr.Ended() {
		fmt.Println(s.Name(), s.SpanKind())
	}
	// Output:
	// process consumer
}
