package asynqtrace_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/fencekit/fencekit/asynqfence"
	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/internal/testkit/redistest"
	"github.com/fencekit/fencekit/tracing"
	"github.com/fencekit/fencekit/tracing/asynqtrace"
)

// TestSchedulerTickSpans runs a leader, then a second one for the same name: a span per tick
// enqueued, the root of its own trace and linked to its term's fencing.lead span; the second
// leader's catch-up of the same tick is a duplicate, not an error.
func TestSchedulerTickSpans(t *testing.T) {
	if time.Since(time.Now().Truncate(time.Hour)) > time.Hour-5*time.Second {
		t.Skip("too close to the next hour")
	}
	r := redistest.New(t)
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	defer tp.Shutdown(context.Background())
	queue := fmt.Sprintf("asynqtrace-%d", time.Now().UnixNano())
	client := asynq.NewClientFromRedisClient(r.Client)
	if r.Mini == nil {
		insp := asynq.NewInspectorFromRedisClient(r.Client)
		t.Cleanup(func() { deleteQueue(t, r.Client, insp, queue) })
	}
	run := func() (stop func()) {
		l := fencing.New(r.Client, fencing.WithPrefix(r.Prefix))
		s := asynqfence.NewScheduler(client, l, "sched",
			asynqfence.WithLeaderOptions(fencing.WithHooks(tracing.Hooks(tracing.WithTracerProvider(tp)))),
			asynqfence.WithSchedulerHooks(asynqtrace.SchedulerHooks(asynqtrace.WithTracerProvider(tp))))
		if _, err := s.Register("@every 1h", asynq.NewTask("hourly", nil), asynq.Queue(queue)); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- s.Run(ctx) }()
		return func() {
			cancel()
			<-done
			_ = l.Close()
		}
	}
	sends := func() []sdktrace.ReadOnlySpan {
		var out []sdktrace.ReadOnlySpan
		for _, s := range sr.Ended() {
			if s.Name() == "send "+queue {
				out = append(out, s)
			}
		}
		return out
	}
	waitUntil := func(n int) {
		deadline := time.Now().Add(10 * time.Second)
		for len(sends()) < n {
			if time.Now().After(deadline) {
				t.Fatalf("got %d tick spans, want %d", len(sends()), n)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	stop := run()
	waitUntil(1)
	stop()
	stop = run()
	waitUntil(2)
	stop()

	var leads []sdktrace.ReadOnlySpan
	for _, s := range sr.Ended() {
		if s.Name() == "fencing.lead" {
			leads = append(leads, s)
		}
	}
	if len(leads) != 2 {
		t.Fatalf("got %d fencing.lead spans, want 2", len(leads))
	}
	for i, s := range sends() {
		a := attrs(s)
		want := map[attribute.Key]string{
			"messaging.system": "asynq", "messaging.operation.type": "send", "messaging.destination.name": queue,
			"asynq.task.type": "hourly", "asynqfence.scheduler": "sched",
			"asynqfence.enqueue.outcome": []string{"enqueued", "duplicate"}[i],
		}
		for k, v := range want {
			if got := a[k].AsString(); got != v {
				t.Errorf("tick span %d: %s = %q, want %q", i, k, got, v)
			}
		}
		if a["messaging.message.id"].AsString() == "" || a["asynqfence.tick"].AsInt64() != time.Now().Truncate(time.Hour).Unix() {
			t.Errorf("tick span %d: message id %v, tick %v", i, a["messaging.message.id"], a["asynqfence.tick"])
		}
		if s.SpanKind() != trace.SpanKindProducer || s.Status().Code != codes.Unset || s.Parent().IsValid() {
			t.Errorf("tick span %d: kind %v, status %v, parent %v; want a Producer root with status Unset", i, s.SpanKind(), s.Status(), s.Parent())
		}
		if links := s.Links(); len(links) != 1 || links[0].SpanContext.SpanID() != leads[i].SpanContext().SpanID() {
			t.Errorf("tick span %d: links %v, want its term's fencing.lead span", i, links)
		}
	}
}
