package echov5trace_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/labstack/echo/v5"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/fencekit/fencekit/tracing/echov5trace"
)

// TestZeroValues builds the middleware from the zero values of the package's one exported
// type, Option (nil, and options given nil), and serves a request through it: none panics.
func TestZeroValues(t *testing.T) {
	noopTP := echov5trace.WithTracerProvider(noop.NewTracerProvider())
	for _, tc := range []struct {
		name string
		opts []echov5trace.Option
	}{
		{"nil Option", []echov5trace.Option{nil, noopTP}},
		{"nil arguments", []echov5trace.Option{echov5trace.WithTracerProvider(nil), echov5trace.WithPropagators(nil),
			echov5trace.WithSkipper(nil), noopTP}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				if p := recover(); p != nil {
					t.Errorf("panicked: %v", p)
				}
			}()
			e := echo.New()
			e.GET("/x", func(c *echo.Context) error { return c.NoContent(http.StatusNoContent) }, echov5trace.Middleware(tc.opts...))
			rec := httptest.NewRecorder()
			e.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/x", nil))
			if rec.Code != http.StatusNoContent {
				t.Errorf("got status %d, want 204", rec.Code)
			}
		})
	}
}
