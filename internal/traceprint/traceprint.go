// Package traceprint lets the example programs print their OpenTelemetry spans to stdout
// when FENCEKIT_TRACE=stdout is set.
package traceprint

import (
	"context"
	"io"
	"os"

	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/tracing"
)

// EnvVar names the environment variable that turns span printing on ("stdout").
const EnvVar = "FENCEKIT_TRACE"

// Tracing is what an example needs to trace: a provider for its own spans, an option that
// instruments its Locker, and a shutdown that flushes the exporter.
type Tracing struct {
	Provider trace.TracerProvider
	Lock     fencing.Option // nil when tracing is off; fencing.New ignores nil options
	Shutdown func(context.Context) error
}

// FromEnv prints every span to w as it ends when FENCEKIT_TRACE=stdout, and traces
// nothing otherwise.
func FromEnv(w io.Writer) (*Tracing, error) {
	if os.Getenv(EnvVar) != "stdout" {
		return &Tracing{Provider: noop.NewTracerProvider(), Shutdown: func(context.Context) error { return nil }}, nil
	}
	exp, err := stdouttrace.New(stdouttrace.WithWriter(w), stdouttrace.WithPrettyPrint())
	if err != nil {
		return nil, err
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	return &Tracing{
		Provider: tp,
		Lock:     fencing.WithHooks(tracing.Hooks(tracing.WithTracerProvider(tp))),
		Shutdown: tp.Shutdown,
	}, nil
}
