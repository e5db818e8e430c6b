package tracing_test

import (
	"context"
	"fmt"
	"testing"

	"go.opentelemetry.io/otel/trace/noop"

	"github.com/fencekit/fencekit/fencing/observe"
	"github.com/fencekit/fencekit/tracing"
)

// TestZeroValues builds Hooks from the zero values of the package's exported types (a nil
// Option, the zero ResourceMode, nil providers, a mode beyond the last) and calls each hook
// with zero arguments, also End and Lost without a Start: none panics. The package's exported
// types, Option and ResourceMode, have no exported methods.
func TestZeroValues(t *testing.T) {
	noopTP := tracing.WithTracerProvider(noop.NewTracerProvider())
	for _, tc := range []struct {
		name string
		opts []tracing.Option
	}{
		{"no options", nil},
		{"nil Option", []tracing.Option{nil}},
		{"nil providers", []tracing.Option{tracing.WithTracerProvider(nil), tracing.WithMeterProvider(nil), noopTP}},
		{"zero ResourceMode", []tracing.Option{tracing.WithResourceAttribute(tracing.ResourceMode(0)), noopTP}},
		{"unknown ResourceMode", []tracing.Option{tracing.WithResourceAttribute(tracing.ResourceMode(255)), noopTP}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				if p := recover(); p != nil {
					t.Errorf("panicked: %v", p)
				}
			}()
			h := tracing.Hooks(tc.opts...)
			if h.Start == nil || h.End == nil || h.Lost == nil {
				t.Fatalf("got hooks %+v, want all three", h)
			}
			bare := context.Background()
			h.End(bare, observe.Event{}) // no Start: nothing to end
			h.Lost(bare, observe.Event{})
			ctx := h.Start(bare, observe.Op(0), "")
			h.Lost(ctx, observe.Event{})
			h.End(ctx, observe.Event{})
			ctx = h.Start(bare, observe.Op(255), "r") // an operation newer than the package
			h.End(ctx, observe.Event{Op: observe.Op(255), Err: fmt.Errorf("x")})
		})
	}
}
