package echov5trace

import (
	"github.com/labstack/echo/v5/middleware"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// An Option configures [Middleware].
type Option interface {
	apply(*config)
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	tp      trace.TracerProvider
	prop    propagation.TextMapPropagator
	skipper middleware.Skipper
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
	if c.prop == nil {
		c.prop = otel.GetTextMapPropagator()
	}
	return c
}

// WithTracerProvider sets the provider of the tracer that records the request spans.
// Default: the global provider ([otel.GetTracerProvider]) at the time Middleware is called.
// A nil provider is ignored.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return optionFunc(func(c *config) {
		if tp != nil {
			c.tp = tp
		}
	})
}

// WithPropagators sets the propagator that extracts the caller's trace context from the
// request's headers. Default: the global propagator ([otel.GetTextMapPropagator]) at the
// time Middleware is called; set one, such as propagation.TraceContext{} for W3C
// traceparent, or the global one stays a no-op and every request starts a new trace. A nil
// propagator is ignored.
func WithPropagators(p propagation.TextMapPropagator) Option {
	return optionFunc(func(c *config) {
		if p != nil {
			c.prop = p
		}
	})
}

// WithSkipper sets which requests get no span. Default: none is skipped. A nil skipper is
// ignored.
func WithSkipper(s middleware.Skipper) Option {
	return optionFunc(func(c *config) {
		if s != nil {
			c.skipper = s
		}
	})
}
