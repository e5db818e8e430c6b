package echov5trace_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/labstack/echo/v5"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/fencekit/fencekit/tracing/echov5trace"
)

// Register the request span first, then the fencing middleware on the routes; lock spans
// started from the request's context become its children.
func ExampleMiddleware() {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	e := echo.New()
	e.Use(echov5trace.Middleware(echov5trace.WithTracerProvider(tp), echov5trace.WithPropagators(propagation.TraceContext{})))
	e.PUT("/orders/:id", func(c *echo.Context) error { return c.NoContent(http.StatusNoContent) })

	e.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodPut, "/orders/42", nil))
	for _, s := range sr.Ended() {
		fmt.Println(s.Name(), s.SpanKind())
	}
	// Output:
	// PUT /orders/:id server
}
