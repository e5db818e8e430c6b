package asynqtrace

import (
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"
)

// An Option configures [Middleware].
type Option interface {
	apply(*config)
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	tp trace.TracerProvider
}

func newConfig(opts []Option) *config {
	c := &config{}
	for _, o := range opts {
		if o != nil {
			o.apply(c)
		}
	}
	if c.tp == nil {
		c.tp = otel.GetTracerProvider()
	}
	return c
}

// WithTracerProvider sets the provider of the tracer that records the job spans. Default:
// the global provider ([otel.GetTracerProvider]) at the time Middleware is called. A nil
// provider is ignored.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return optionFunc(func(c *config) {
		if tp != nil {
			c.tp = tp
		}
	})
}
