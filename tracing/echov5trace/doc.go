// Package echov5trace starts an OpenTelemetry server span around every request of an Echo
// v5 application, the request span that the lock spans of a Locker instrumented with
// [github.com/fencekit/fencekit/tracing.Hooks] sit inside:
//
//	e := echo.New()
//	e.Use(echov5trace.Middleware(echov5trace.WithTracerProvider(tp)))   // first
//	e.PUT("/orders/:id", update, fencemw.Fence(locker))                  // lock spans inside
//
// For Echo v4, use otelecho (go.opentelemetry.io/contrib/instrumentation/github.com/labstack/echo/otelecho),
// which OpenTelemetry maintains. Its maintainers declined an Echo v5 version and point to
// labstack/echo-opentelemetry, which the module proxy did not serve when this package was
// written; this package covers what a lock's trace needs, following OpenTelemetry's HTTP
// server conventions.
//
// Each request gets one span of kind Server, named "<method> <route>" ("PUT /orders/:id"),
// or the method alone when no route matched, with http.request.method, url.path,
// url.scheme, http.route, http.response.status_code, server.address and
// user_agent.original. A status of 500 or more sets the span's status to Error and
// error.type; 4xx responses, the 423 of a busy lock among them, leave it Unset. The trace
// context of the incoming request (W3C traceparent by default) is extracted with the
// configured propagator, so the span continues the caller's trace.
//
// It lives in a package of its own so that users of package tracing who do not run Echo v5
// do not import it.
package echov5trace
