package tracing

import (
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// An Option configures [Hooks].
type Option interface {
	apply(*config)
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	tp   trace.TracerProvider
	mp   metric.MeterProvider
	mode ResourceMode
}

// WithTracerProvider sets the provider of the tracer that records spans. Default: the global
// provider ([otel.GetTracerProvider]) at the time Hooks is called. A nil provider is ignored.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return optionFunc(func(c *config) {
		if tp != nil {
			c.tp = tp
		}
	})
}

// WithMeterProvider sets the provider of the meter that records metrics. Default: the global
// provider ([otel.GetMeterProvider]) at the time Hooks is called. A nil provider is ignored.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return optionFunc(func(c *config) {
		if mp != nil {
			c.mp = mp
		}
	})
}

// A ResourceMode says how spans identify the locked resource. Metrics never carry it.
type ResourceMode uint8

// The resource modes.
const (
	// ResourceOn records the name as fencing.resource. The default.
	ResourceOn ResourceMode = iota
	// ResourceHashed records fencing.resource.hash instead: the first 16 hex digits of the
	// name's SHA-256. The hash is not salted: names drawn from a small or guessable set (user
	// IDs, order numbers) can be recovered by hashing candidates. Use ResourceOff for those.
	ResourceHashed
	// ResourceOff records nothing that identifies the resource.
	ResourceOff
)

// WithResourceAttribute sets how spans identify the locked resource. Default: [ResourceOn].
// In the modes other than ResourceOn, the resource name is also removed from the error
// message recorded as a span's status description. An unknown mode acts as ResourceOff.
func WithResourceAttribute(mode ResourceMode) Option {
	return optionFunc(func(c *config) { c.mode = mode })
}
