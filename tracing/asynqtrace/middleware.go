package asynqtrace

import (
	"context"
	"fmt"

	"github.com/hibiken/asynq"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/fencekit/fencekit/asynqfence"
)

// Attribute keys this package records besides OpenTelemetry's messaging conventions.
const (
	// AttrTaskType is the task's type (asynq.Task.Type).
	AttrTaskType = attribute.Key("asynq.task.type")
	// AttrRetryCount is how many times the task was retried before this attempt
	// (asynq.GetRetryCount).
	AttrRetryCount = attribute.Key("asynq.task.retry_count")
	// AttrOutcome is the attempt's outcome: "ok", "busy" or "failed".
	AttrOutcome = attribute.Key("asynq.task.outcome")
)

// The values of AttrOutcome.
const (
	OutcomeOK     = "ok"
	OutcomeBusy   = "busy"
	OutcomeFailed = "failed"
)

// errNilHandler is returned for every task when the middleware wraps a nil handler; Asynq
// archives the task without retries, since retrying cannot help.
var errNilHandler = fmt.Errorf("asynqtrace: nil handler: %w", asynq.SkipRetry)

// Middleware returns middleware for [asynq.ServeMux.Use] that runs every task inside a job
// span; see the package documentation for its name and attributes. Use it before (outside)
// asynqfence.Middleware, so that the lock spans are its children. The task's queue, ID and
// retry count come from the handler's context (asynq.GetQueueName, GetTaskID,
// GetRetryCount) and are left out when it has none. The handler's error is returned as it
// is. The middleware is safe for concurrent use and never panics: a nil task passes through untraced.
func Middleware(opts ...Option) asynq.MiddlewareFunc {
	tracer := newConfig(opts).tp.Tracer(ScopeName, trace.WithInstrumentationVersion(Version))
	return func(next asynq.Handler) asynq.Handler {
		return asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
			switch {
			case next == nil:
				return errNilHandler
			case t == nil:
				return next.ProcessTask(ctx, t)
			}
			name := "process"
			attrs := []attribute.KeyValue{
				semconv.MessagingSystemKey.String("asynq"),
				semconv.MessagingOperationTypeProcess,
				semconv.MessagingOperationName("process"),
				AttrTaskType.String(t.Type()),
			}
			if q, ok := asynq.GetQueueName(ctx); ok {
				name += " " + q
				attrs = append(attrs, semconv.MessagingDestinationName(q))
			}
			if id, ok := asynq.GetTaskID(ctx); ok {
				attrs = append(attrs, semconv.MessagingMessageID(id))
			}
			if n, ok := asynq.GetRetryCount(ctx); ok {
				attrs = append(attrs, AttrRetryCount.Int(n))
			}
			ctx, span := tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(attrs...))
			defer span.End()
			err := next.ProcessTask(ctx, t)
			switch {
			case err == nil:
				span.SetAttributes(AttrOutcome.String(OutcomeOK))
			case asynqfence.IsBusy(err):
				span.SetAttributes(AttrOutcome.String(OutcomeBusy))
			default:
				span.SetAttributes(AttrOutcome.String(OutcomeFailed), semconv.ErrorType(err))
				span.SetStatus(codes.Error, err.Error())
			}
			return err
		})
	}
}
