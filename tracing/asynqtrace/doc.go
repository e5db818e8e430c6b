// Package asynqtrace starts an OpenTelemetry span around every Asynq task, the job span
// that the lock spans of a Locker instrumented with [github.com/fencekit/fencekit/tracing.Hooks] sit inside:
//
//	mux := asynq.NewServeMux()
//	mux.Use(asynqtrace.Middleware(asynqtrace.WithTracerProvider(tp)))           // outermost
//	mux.Use(asynqfence.Middleware(locker, resource))                             // lock spans inside
//
// Each task gets one span of kind Consumer, named "process <queue>", with OpenTelemetry's
// messaging attributes (messaging.system "asynq", messaging.operation.type and .name
// "process", messaging.destination.name the queue, messaging.message.id the task ID) and
// asynq.task.type, asynq.task.retry_count and asynq.task.outcome ("ok", "busy" or
// "failed"). A task whose resource was busy ([asynqfence.IsBusy]) is not an error: its
// status stays Unset, as Asynq's IsFailure helper of asynqfence treats it. A failed task's
// span gets status Error and error.type. No official Asynq instrumentation exists; the
// messaging conventions are still at Development status in OpenTelemetry, and "asynq" is
// not a registered messaging.system value.
//
// For an [asynqfence.Scheduler], [SchedulerHooks] records a span of kind Producer for every
// tick the leader enqueues, "send <queue>", linked to the span of the leadership term
// (fencing.lead) it was enqueued in. The campaigns and terms are traced by the Locker's own
// hooks; give them once, to the Locker, not again in asynqfence.WithLeaderOptions (hooks add
// up, and every campaign and term would be traced twice):
//
//	locker := fencing.New(rdb, fencing.WithHooks(tracing.Hooks()))        // campaigns and terms
//	s := asynqfence.NewScheduler(client, locker, "reports",
//		asynqfence.WithSchedulerHooks(asynqtrace.SchedulerHooks()))         // ticks
//
// It lives in a package of its own so that users of package tracing who do not run Asynq do not
// import it.
package asynqtrace
