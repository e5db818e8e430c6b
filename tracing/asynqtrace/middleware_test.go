package asynqtrace_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
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

type quietLogger struct{}

func (quietLogger) Debug(...any) {}
func (quietLogger) Info(...any)  {}
func (quietLogger) Warn(...any)  {}
func (quietLogger) Error(...any) {}
func (quietLogger) Fatal(...any) {}

func byPayload(t *asynq.Task) (string, error) { return "acct:" + string(t.Payload()), nil }

func attrs(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value
	}
	return m
}

// TestServerJobSpan runs a real Asynq server: one trace per task, the job span its root, of
// kind Consumer with the messaging attributes, and the Locker's lock spans inside it.
func TestServerJobSpan(t *testing.T) {
	r := redistest.New(t)
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	locker := fencing.New(r.Client, fencing.WithPrefix(r.Prefix),
		fencing.WithHooks(tracing.Hooks(tracing.WithTracerProvider(tp))))
	defer locker.Close()

	queue := fmt.Sprintf("asynqtrace-%d", time.Now().UnixNano())
	done := make(chan string, 2)
	mux := asynq.NewServeMux()
	mux.Use(asynqtrace.Middleware(asynqtrace.WithTracerProvider(tp)))
	mux.Use(asynqfence.Middleware(locker, byPayload))
	mux.HandleFunc("transfer", func(ctx context.Context, t *asynq.Task) error {
		id, _ := asynq.GetTaskID(ctx)
		done <- id
		return nil
	})
	srv := asynq.NewServerFromRedisClient(r.Client, asynq.Config{
		Queues: map[string]int{queue: 1}, Concurrency: 1, Logger: quietLogger{},
		TaskCheckInterval: 50 * time.Millisecond, ShutdownTimeout: 3 * time.Second,
	})
	if err := srv.Start(mux); err != nil {
		t.Fatal(err)
	}
	client := asynq.NewClientFromRedisClient(r.Client)
	insp := asynq.NewInspectorFromRedisClient(r.Client)
	t.Cleanup(func() {
		srv.Shutdown()
		deleteQueue(t, r.Client, insp, queue)
	})
	var ids []string
	for _, payload := range []string{"a1", "a2"} {
		info, err := client.Enqueue(asynq.NewTask("transfer", []byte(payload)), asynq.Queue(queue))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, info.ID)
	}
	for range ids {
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Fatal("the tasks did not run within 20s")
		}
	}
	var jobs []sdktrace.ReadOnlySpan
	deadline := time.Now().Add(10 * time.Second)
	for len(jobs) < len(ids) && time.Now().Before(deadline) {
		jobs = jobs[:0]
		for _, s := range sr.Ended() {
			if s.SpanKind() == trace.SpanKindConsumer {
				jobs = append(jobs, s)
			}
		}
		time.Sleep(10 * time.Millisecond) // the job span ends just after the handler returns
	}
	if len(jobs) != len(ids) {
		t.Fatalf("got %d job spans, want %d", len(jobs), len(ids))
	}
	traces := map[trace.TraceID]bool{}
	for _, job := range jobs {
		a := attrs(job)
		if job.Name() != "process "+queue || job.Parent().IsValid() {
			t.Errorf("job span %q, parent %v: want %q, a root", job.Name(), job.Parent(), "process "+queue)
		}
		for k, want := range map[attribute.Key]string{
			"messaging.system": "asynq", "messaging.operation.type": "process",
			"messaging.destination.name": queue, "asynq.task.type": "transfer", "asynq.task.outcome": "ok",
		} {
			if got := a[k].Emit(); got != want {
				t.Errorf("%s: got %q, want %q", k, got, want)
			}
		}
		if id := a["messaging.message.id"].AsString(); id != ids[0] && id != ids[1] {
			t.Errorf("messaging.message.id: got %q, want one of %q", id, ids)
		}
		if got := a["asynq.task.retry_count"]; got.Type() != attribute.INT64 || got.AsInt64() != 0 {
			t.Errorf("asynq.task.retry_count: got %v, want 0", got.Emit())
		}
		if job.Status().Code != codes.Unset {
			t.Errorf("status: got %v, want Unset", job.Status())
		}
		traces[job.SpanContext().TraceID()] = true
		var children []string
		for _, s := range sr.Ended() {
			if s.Parent().SpanID() == job.SpanContext().SpanID() && s.SpanContext().TraceID() == job.SpanContext().TraceID() {
				children = append(children, s.Name())
			}
		}
		if len(children) < 2 || children[0] != "fencing.acquire" {
			t.Errorf("job span children: got %q, want fencing.acquire and fencing.release", children)
		}
	}
	if len(traces) != len(ids) {
		t.Errorf("got %d traces, want one per task (%d)", len(traces), len(ids))
	}
}

// TestOutcomes checks the outcome of each kind of result: a busy resource leaves the status
// Unset, a failure sets Error and error.type, and the error is returned as it is. Outside an
// Asynq server there is no queue, task ID or retry count.
func TestOutcomes(t *testing.T) {
	r := redistest.New(t)
	locker := fencing.New(r.Client, fencing.WithPrefix(r.Prefix))
	defer locker.Close()
	held, err := locker.TryAcquire(t.Context(), "acct:busy")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(context.Background())
	errBoom := errors.New("boom")
	tests := []struct {
		name    string
		payload string
		result  error
		outcome string
		status  codes.Code
	}{
		{"ok", "a1", nil, asynqtrace.OutcomeOK, codes.Unset},
		{"busy", "busy", nil, asynqtrace.OutcomeBusy, codes.Unset},
		{"failed", "a1", errBoom, asynqtrace.OutcomeFailed, codes.Error},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sr := tracetest.NewSpanRecorder()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
			h := asynqtrace.Middleware(asynqtrace.WithTracerProvider(tp))(asynqfence.Wrap(
				asynq.HandlerFunc(func(context.Context, *asynq.Task) error { return tt.result }), locker, byPayload))
			err := h.ProcessTask(t.Context(), asynq.NewTask("transfer", []byte(tt.payload)))
			if tt.result != nil && !errors.Is(err, tt.result) {
				t.Errorf("got error %v, want %v", err, tt.result)
			}
			if tt.outcome == asynqtrace.OutcomeBusy && !asynqfence.IsBusy(err) {
				t.Errorf("got error %v, want a busy one", err)
			}
			spans := sr.Ended()
			if len(spans) != 1 {
				t.Fatalf("got %d spans, want 1", len(spans))
			}
			s := spans[0]
			a := attrs(s)
			if got := a[asynqtrace.AttrOutcome].AsString(); got != tt.outcome {
				t.Errorf("outcome: got %q, want %q", got, tt.outcome)
			}
			if s.Status().Code != tt.status {
				t.Errorf("status: got %v, want %v", s.Status().Code, tt.status)
			}
			if _, ok := a["error.type"]; ok != (tt.status == codes.Error) {
				t.Errorf("error.type present: %v, want %v", ok, tt.status == codes.Error)
			}
			if s.Name() != "process" || s.SpanKind() != trace.SpanKindConsumer {
				t.Errorf("got span %q of kind %v, want \"process\" of kind Consumer", s.Name(), s.SpanKind())
			}
			for _, k := range []attribute.Key{"messaging.destination.name", "messaging.message.id", asynqtrace.AttrRetryCount} {
				if _, ok := a[k]; ok {
					t.Errorf("%s set outside a server", k)
				}
			}
			if s.InstrumentationScope().Name != asynqtrace.ScopeName {
				t.Errorf("scope: got %q, want %q", s.InstrumentationScope().Name, asynqtrace.ScopeName)
			}
		})
	}
}

// deleteQueue removes every key of an Asynq queue: DeleteQueue leaves the processed and
// failed counters (asynq:{queue}:processed, and one per day), which have no expiry or a long one.
func deleteQueue(t testing.TB, c *redis.Client, insp *asynq.Inspector, queue string) {
	_ = insp.DeleteQueue(queue, true)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	iter := c.Scan(ctx, 0, "asynq:{"+queue+"}:*", 500).Iterator()
	for iter.Next(ctx) {
		c.Del(ctx, iter.Val())
	}
	if err := iter.Err(); err != nil {
		t.Logf("cleanup of queue %s: %v", queue, err)
	}
}
