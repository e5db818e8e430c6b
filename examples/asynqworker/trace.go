package main

import (
	"context"
	"io"

	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/tracing"
)

// tracingSetup is what the worker needs to trace: a provider for its own spans, an option
// that instruments its Locker, and a shutdown that flushes the exporter.
type tracingSetup struct {
	Provider trace.TracerProvider
	Lock     fencing.Option // nil when tracing is off; fencing.New ignores nil options
	Shutdown func(context.Context) error
}

// newTracing prints every span to w as it ends when mode is "stdout" (FENCEKIT_TRACE=stdout),
// and traces nothing otherwise. A real worker would export to a collector instead.
func newTracing(mode string, w io.Writer) (*tracingSetup, error) {
	if mode != "stdout" {
		return &tracingSetup{Provider: noop.NewTracerProvider(), Shutdown: func(context.Context) error { return nil }}, nil
	}
	exp, err := stdouttrace.New(stdouttrace.WithWriter(w), stdouttrace.WithPrettyPrint())
	if err != nil {
		return nil, err
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	return &tracingSetup{
		Provider: tp,
		Lock:     fencing.WithHooks(tracing.Hooks(tracing.WithTracerProvider(tp))),
		Shutdown: tp.Shutdown,
	}, nil
}
