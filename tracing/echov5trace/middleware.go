package echov5trace

import (
	"net"
	"net/http"
	"strconv"

	"github.com/labstack/echo/v5"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// Middleware returns Echo v5 middleware that runs every request inside a server span; see
// the package documentation for its name and attributes. Register it with e.Use before the
// fencing middleware (e.Use runs after routing, so the route is known; e.Pre would leave it
// empty). The span's context replaces the request's context while the rest of the chain
// runs, so spans started from c.Request().Context() are its children; the original request
// is restored afterwards. The chain's error is returned as it is, for Echo's error handler.
// The middleware is safe for concurrent use.
func Middleware(opts ...Option) echo.MiddlewareFunc {
	cfg := newConfig(opts)
	tracer := cfg.tp.Tracer(ScopeName, trace.WithInstrumentationVersion(Version))
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c *echo.Context) error {
			if cfg.skipper != nil && cfg.skipper(c) {
				return next(c)
			}
			req := c.Request()
			ctx := cfg.prop.Extract(req.Context(), propagation.HeaderCarrier(req.Header))
			route := c.Path()
			name := req.Method
			if route != "" {
				name += " " + route
			}
			attrs := []attribute.KeyValue{
				semconv.HTTPRequestMethodKey.String(req.Method),
				semconv.URLPath(req.URL.Path),
				semconv.URLScheme(c.Scheme()),
			}
			if route != "" {
				attrs = append(attrs, semconv.HTTPRoute(route))
			}
			if host := serverAddress(req); host != "" {
				attrs = append(attrs, semconv.ServerAddress(host))
			}
			if ua := req.UserAgent(); ua != "" {
				attrs = append(attrs, semconv.UserAgentOriginal(ua))
			}
			ctx, span := tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attrs...))
			defer span.End()
			c.SetRequest(req.WithContext(ctx))
			defer c.SetRequest(req)

			err := next(c)
			_, status := echo.ResolveResponseStatus(c.Response(), err)
			span.SetAttributes(semconv.HTTPResponseStatusCode(status))
			if status >= http.StatusInternalServerError {
				if err != nil {
					span.SetAttributes(semconv.ErrorType(err))
					span.SetStatus(codes.Error, err.Error())
				} else {
					span.SetAttributes(semconv.ErrorTypeKey.String(strconv.Itoa(status)))
					span.SetStatus(codes.Error, "")
				}
			}
			return err
		}
	}
}

// serverAddress returns the host the request was sent to, without its port.
func serverAddress(req *http.Request) string {
	host := req.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		return h
	}
	return host
}
