package echov5trace_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/labstack/echo/v5"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/internal/testkit/redistest"
	fencemw "github.com/fencekit/fencekit/middleware-v5"
	"github.com/fencekit/fencekit/tracing"
	"github.com/fencekit/fencekit/tracing/echov5trace"
)

func attrs(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value
	}
	return m
}

// TestRequestSpan checks one trace per request, the request span of kind Server with the
// HTTP server attributes, the lock spans of the fencing middleware inside it, the caller's
// W3C trace context continued, and status Error only for 5xx.
func TestRequestSpan(t *testing.T) {
	r := redistest.New(t)
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	locker := fencing.New(r.Client, fencing.WithPrefix(r.Prefix),
		fencing.WithHooks(tracing.Hooks(tracing.WithTracerProvider(tp))))
	defer locker.Close()

	e := echo.New()
	e.Use(echov5trace.Middleware(echov5trace.WithTracerProvider(tp), echov5trace.WithPropagators(propagation.TraceContext{})))
	e.PUT("/orders/:id", func(c *echo.Context) error {
		if c.Param("id") == "500" {
			return errors.New("boom")
		}
		return c.NoContent(http.StatusNoContent)
	}, fencemw.Fence(locker))
	held, err := locker.TryAcquire(t.Context(), fencemw.RouteResourceName("/orders/:id", "busy"))
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(context.Background())
	sr.Reset()

	const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	tests := []struct {
		name        string
		path        string
		traceparent string
		status      int
		code        codes.Code
	}{
		{"ok", "/orders/1", "", http.StatusNoContent, codes.Unset},
		{"ok again", "/orders/2", "", http.StatusNoContent, codes.Unset},
		{"caller's trace", "/orders/3", parent, http.StatusNoContent, codes.Unset},
		{"busy", "/orders/busy", "", http.StatusLocked, codes.Unset},
		{"server error", "/orders/500", "", http.StatusInternalServerError, codes.Error},
	}
	traces := map[trace.TraceID]bool{}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sr.Reset()
			req := httptest.NewRequest(http.MethodPut, "http://shop.example:8080"+tt.path, nil)
			req.Header.Set("User-Agent", "fencekit-test")
			if tt.traceparent != "" {
				req.Header.Set("traceparent", tt.traceparent)
			}
			rec := httptest.NewRecorder()
			e.ServeHTTP(rec, req)
			if rec.Code != tt.status {
				t.Fatalf("got status %d, want %d", rec.Code, tt.status)
			}
			var server sdktrace.ReadOnlySpan
			for _, s := range sr.Ended() {
				if s.SpanKind() == trace.SpanKindServer {
					if server != nil {
						t.Fatal("more than one server span")
					}
					server = s
				}
			}
			if server == nil {
				t.Fatal("no server span")
			}
			if server.Name() != "PUT /orders/:id" {
				t.Errorf("name: got %q, want %q", server.Name(), "PUT /orders/:id")
			}
			a := attrs(server)
			for k, want := range map[attribute.Key]string{
				"http.request.method": "PUT", "url.path": tt.path, "http.route": "/orders/:id",
				"server.address": "shop.example", "user_agent.original": "fencekit-test", "url.scheme": "http",
			} {
				if got := a[k].Emit(); got != want {
					t.Errorf("%s: got %q, want %q", k, got, want)
				}
			}
			if got := a["http.response.status_code"].AsInt64(); got != int64(tt.status) {
				t.Errorf("http.response.status_code: got %d, want %d", got, tt.status)
			}
			if server.Status().Code != tt.code {
				t.Errorf("status: got %v, want %v", server.Status(), tt.code)
			}
			if _, ok := a["error.type"]; ok != (tt.code == codes.Error) {
				t.Errorf("error.type present: %v, want %v", ok, tt.code == codes.Error)
			}
			id := server.SpanContext().TraceID()
			if tt.traceparent != "" {
				if id.String() != "4bf92f3577b34da6a3ce929d0e0e4736" || !server.Parent().IsRemote() {
					t.Errorf("got trace %s, parent %v; want the caller's trace, remote parent", id, server.Parent())
				}
			} else if server.Parent().IsValid() {
				t.Errorf("parent: got %v, want none", server.Parent())
			}
			if traces[id] {
				t.Errorf("trace %s shared with an earlier request", id)
			}
			traces[id] = true
			var acquire sdktrace.ReadOnlySpan
			for _, s := range sr.Ended() {
				if s.Name() == "fencing.acquire" {
					acquire = s
				}
			}
			if acquire == nil || acquire.Parent().SpanID() != server.SpanContext().SpanID() || acquire.SpanContext().TraceID() != id {
				t.Errorf("fencing.acquire is not a child of the request span")
			}
		})
	}
}

// TestNoRoute checks a request no route matched: the span is named after the method alone.
func TestNoRoute(t *testing.T) {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	e := echo.New()
	e.Use(echov5trace.Middleware(echov5trace.WithTracerProvider(tp)))
	rec := httptest.NewRecorder()
	e.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/nowhere", nil))
	spans := sr.Ended()
	if len(spans) != 1 {
		t.Fatalf("got %d spans, want 1", len(spans))
	}
	if got := spans[0].Name(); got != "GET" {
		t.Errorf("name: got %q, want %q", got, "GET")
	}
	if got := attrs(spans[0])["http.response.status_code"].AsInt64(); got != http.StatusNotFound {
		t.Errorf("status: got %d, want 404", got)
	}
}
