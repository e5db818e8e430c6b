package middleware_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/internal/testkit/redistest"
	fencemw "github.com/fencekit/fencekit/middleware"
)

// TestResourceName checks that ResourceName and RouteResourceName give the names the
// middleware locks: a lock taken on the name from other code makes the request busy, and
// DenyHandler is told the same name.
func TestResourceName(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		namespace string
		route     string
		target    string
		want      string
	}{
		{"namespace", "account", "/accounts/:id", "/accounts/a1", fencemw.ResourceName("account", "a1")},
		{"namespace with colon and slash", "/bank:eu", "/accounts/:id", "/accounts/a1", fencemw.ResourceName("/bank:eu", "a1")},
		{"route", "", "/orders/:id", "/orders/42", fencemw.RouteResourceName("/orders/:id", "42")},
		{"route with a prefix", "", "/api/orders/:id", "/api/orders/42", fencemw.RouteResourceName("/api/orders/:id", "42")},
	}
	if got, want := fencemw.ResourceName("account", "a1"), "account:a1"; got != want {
		t.Errorf("ResourceName: got %q, want %q", got, want)
	}
	if got, want := fencemw.RouteResourceName("/orders/:id", "42"), "/orders/:id 42"; got != want {
		t.Errorf("RouteResourceName: got %q, want %q", got, want)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := redistest.New(t)
			l := fencing.New(r.Client, fencing.WithPrefix(r.Prefix))
			defer l.Close()
			held, err := l.TryAcquire(t.Context(), tt.want)
			if err != nil {
				t.Fatalf("TryAcquire(%q): %v", tt.want, err)
			}
			var denied string
			e := echo.New()
			e.PUT(tt.route, func(c echo.Context) error { return c.NoContent(http.StatusNoContent) },
				fencemw.FenceWithConfig(fencemw.Config{
					Locker:    l,
					Namespace: tt.namespace,
					DenyHandler: func(c echo.Context, resource string, err error) error {
						denied = resource
						return fencemw.DefaultDenyHandler(c, resource, err)
					},
				}))
			send := func() int {
				rec := httptest.NewRecorder()
				e.ServeHTTP(rec, httptest.NewRequest(http.MethodPut, tt.target, nil))
				return rec.Code
			}
			if code := send(); code != http.StatusLocked {
				t.Fatalf("with %q held: got status %d, want %d", tt.want, code, http.StatusLocked)
			}
			if denied != tt.want {
				t.Errorf("DenyHandler resource: got %q, want %q", denied, tt.want)
			}
			if err := held.Release(t.Context()); err != nil {
				t.Fatal(err)
			}
			if code := send(); code != http.StatusNoContent {
				t.Errorf("after release: got status %d, want %d", code, http.StatusNoContent)
			}
		})
	}
}
