package asynqtrace

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/fencekit/fencekit/asynqfence"
)

// Attribute keys of the tick spans.
const (
	// AttrScheduler is the name of the asynqfence.Scheduler.
	AttrScheduler = attribute.Key("asynqfence.scheduler")
	// AttrEntryID is the scheduler entry's ID.
	AttrEntryID = attribute.Key("asynqfence.entry.id")
	// AttrTick is the tick's scheduled time, in Unix seconds.
	AttrTick = attribute.Key("asynqfence.tick")
	// AttrEnqueueOutcome is the enqueue's outcome: "enqueued", "duplicate" or "failed".
	AttrEnqueueOutcome = attribute.Key("asynqfence.enqueue.outcome")
)

// The values of AttrEnqueueOutcome.
const (
	OutcomeEnqueued  = "enqueued"
	OutcomeDuplicate = "duplicate"
)

// tickSpan is the type of the context key under which one SchedulerHooks value keeps its
// tick's span; each value has a key of its own (not zero-sized, so that pointers differ).
type tickSpan struct{ _ byte }

// SchedulerHooks returns hooks for [asynqfence.WithSchedulerHooks] that record a span for
// every tick the leader enqueues: of kind Producer, named "send <queue>", with the messaging
// attributes (messaging.system "asynq", messaging.operation.type and .name "send",
// messaging.destination.name the queue, messaging.message.id the task ID), asynq.task.type,
// asynqfence.scheduler, asynqfence.entry.id, asynqfence.tick and asynqfence.enqueue.outcome.
// A duplicate (the tick was already enqueued, by this leader's predecessor) is not an error;
// a failed enqueue sets status Error and error.type. Each tick span is the root of a trace
// of its own, linked to the span of the term it was enqueued in (the fencing.lead span,
// when the Locker has package tracing's hooks), so that a term that lasts days does not
// collect every tick in one trace. The hooks are safe for concurrent use.
func SchedulerHooks(opts ...Option) asynqfence.SchedulerHooks {
	tracer := newConfig(opts).tp.Tracer(ScopeName, trace.WithInstrumentationVersion(Version))
	key := new(tickSpan)
	return asynqfence.SchedulerHooks{
		Start: func(ctx context.Context, e asynqfence.EnqueueEvent) context.Context {
			attrs := []attribute.KeyValue{
				semconv.MessagingSystemKey.String("asynq"),
				semconv.MessagingOperationTypeSend,
				semconv.MessagingOperationName("send"),
				semconv.MessagingDestinationName(e.Queue),
				semconv.MessagingMessageID(e.TaskID),
				AttrScheduler.String(e.Scheduler),
				AttrEntryID.String(e.EntryID),
				AttrTick.Int64(e.Tick.Unix()),
			}
			if e.Task != nil {
				attrs = append(attrs, AttrTaskType.String(e.Task.Type()))
			}
			start := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(attrs...), trace.WithNewRoot()}
			if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
				start = append(start, trace.WithLinks(trace.Link{SpanContext: sc}))
			}
			ctx, span := tracer.Start(ctx, "send "+e.Queue, start...)
			return context.WithValue(ctx, key, span)
		},
		End: func(ctx context.Context, e asynqfence.EnqueueEvent) {
			span, ok := ctx.Value(key).(trace.Span)
			if !ok {
				return
			}
			switch {
			case e.Err != nil:
				span.SetAttributes(AttrEnqueueOutcome.String(OutcomeFailed), semconv.ErrorType(e.Err))
				span.SetStatus(codes.Error, e.Err.Error())
			case e.Duplicate:
				span.SetAttributes(AttrEnqueueOutcome.String(OutcomeDuplicate))
			default:
				span.SetAttributes(AttrEnqueueOutcome.String(OutcomeEnqueued))
			}
			span.End()
		},
	}
}
