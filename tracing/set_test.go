package tracing_test

import (
	"context"
	"errors"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/internal/testkit/redistest"
)

func TestSetSpans(t *testing.T) {
	r := redistest.New(t)
	tel := newTelemetry(t)
	l := newLocker(t, r, tel.hooks())
	ctx, parent := tel.parent(t.Context(), "POST /transfer/:from/:to")

	if err := l.DoAll(ctx, []string{"acct-b", "acct-a", "acct-b"}, func(context.Context) error { return nil }); err != nil {
		t.Fatalf("DoAll: %v", err)
	}
	holdLock(t, r, "acct-b")
	if _, err := l.TryAcquireAll(ctx, []string{"acct-a", "acct-b", "acct-c"}); !errors.Is(err, fencing.ErrNotAcquired) {
		t.Fatalf("TryAcquireAll: got %v, want ErrNotAcquired", err)
	}
	parent.End()

	acq := tel.ended("fencing.acquire_all")
	if len(acq) != 2 {
		t.Fatalf("got spans %v, want 2 acquire_all", spanNames(tel.spans.Ended()))
	}
	if n := len(tel.ended("fencing.acquire")); n != 0 {
		t.Fatalf("got %d single acquire spans, want none: one span for the set", n)
	}
	wantAttrs(t, acq[0], map[attribute.Key]any{
		"fencing.operation": "acquire_all", "fencing.resource.count": int64(2), "fencing.outcome": "acquired",
		"fencing.attempts": int64(1), "fencing.resource": nil, "error.type": nil,
	})
	wantAttrs(t, acq[1], map[attribute.Key]any{
		"fencing.operation": "try_acquire_all", "fencing.resource.count": int64(3), "fencing.outcome": "busy",
		"fencing.resource": "acct-b",
	})
	rel := tel.only(t, "fencing.release_all")
	wantAttrs(t, rel, map[attribute.Key]any{
		"fencing.operation": "release_all", "fencing.resource.count": int64(2), "fencing.outcome": "ok",
	})
	for _, s := range append(acq, rel) {
		wantStatus(t, s, codes.Unset)
		wantParent(t, s, parent.SpanContext())
	}
}
