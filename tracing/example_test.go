package tracing_test

import (
	"context"
	"fmt"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/tracing"
)

func ExampleHooks() {
	srv, _ := miniredis.Run()
	defer srv.Close()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()

	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	defer tp.Shutdown(context.Background())

	locker := fencing.New(rdb, fencing.WithHooks(tracing.Hooks(tracing.WithTracerProvider(tp))))
	defer locker.Close()

	ctx, request := tp.Tracer("app").Start(context.Background(), "POST /orders/:id")
	err := locker.Do(ctx, "order:42", func(ctx context.Context) error {
		token, _ := fencing.TokenFromContext(ctx)
		fmt.Println("writing with token", token)
		return nil
	})
	request.End()
	if err != nil {
		fmt.Println(err)
	}

	for _, s := range spans.Ended() {
		var outcome string
		for _, kv := range s.Attributes() {
			if kv.Key == "fencing.outcome" {
				outcome = kv.Value.AsString()
			}
		}
		fmt.Printf("%-16s %-9s child of request: %v\n", s.Name(), outcome, s.Parent().SpanID() == request.SpanContext().SpanID())
	}
	// Output:
	// writing with token 1
	// fencing.acquire  acquired  child of request: true
	// fencing.release  ok        child of request: true
	// POST /orders/:id           child of request: false
}
