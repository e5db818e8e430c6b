package middleware_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/internal/testkit/redistest"
	fencemw "github.com/fencekit/fencekit/middleware"
)

// TestZeroValues calls the method of each exported type, ToMiddleware, on the zero value,
// on DefaultConfig (whose Locker is nil) and with only a Locker set: each returns an error
// matching fencing.ErrInvalid or a middleware that serves requests, and none panics. (A nil
// *Config or *IdempotencyConfig cannot call ToMiddleware, a value method, without a nil
// dereference at the call, as for Echo's own configs: there is nothing to check there.)
func TestZeroValues(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	l := fencing.New(r.Client, fencing.WithPrefix(r.Prefix))
	t.Cleanup(func() { _ = l.Close() })
	built := func(mw echo.MiddlewareFunc, err error) (echo.MiddlewareFunc, error) { return mw, err }
	for _, tc := range []struct {
		name string
		call func() (echo.MiddlewareFunc, error)
		want error // nil: a middleware that serves a request
	}{
		{"Config{}.ToMiddleware", func() (echo.MiddlewareFunc, error) { return built(fencemw.Config{}.ToMiddleware()) }, fencing.ErrInvalid},
		{"DefaultConfig.ToMiddleware", func() (echo.MiddlewareFunc, error) { return built(fencemw.DefaultConfig.ToMiddleware()) }, fencing.ErrInvalid},
		{"IdempotencyConfig{}.ToMiddleware", func() (echo.MiddlewareFunc, error) {
			return built(fencemw.IdempotencyConfig{}.ToMiddleware())
		}, fencing.ErrInvalid},
		{"Config{Locker}.ToMiddleware", func() (echo.MiddlewareFunc, error) {
			return built(fencemw.Config{Locker: l}.ToMiddleware())
		}, nil},
		{"IdempotencyConfig{Locker}.ToMiddleware", func() (echo.MiddlewareFunc, error) {
			return built(fencemw.IdempotencyConfig{Locker: l}.ToMiddleware())
		}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mw echo.MiddlewareFunc
			err := func() (err error) {
				defer func() {
					if p := recover(); p != nil {
						err = fmt.Errorf("panic: %v", p)
						t.Errorf("panicked: %v", p)
					}
				}()
				mw, err = tc.call()
				return err
			}()
			switch {
			case tc.want != nil && (!errors.Is(err, tc.want) || mw != nil):
				t.Errorf("got %v (a middleware: %v), want only an error matching %v", err, mw != nil, tc.want)
			case tc.want == nil && (err != nil || mw == nil):
				t.Errorf("got %v, want a middleware", err)
			case tc.want == nil:
				e := echo.New()
				e.POST("/items/:id", func(c echo.Context) error { return c.NoContent(http.StatusNoContent) }, mw)
				rec := httptest.NewRecorder()
				req := httptest.NewRequest(http.MethodPost, "/items/1", nil)
				req.Header.Set("Idempotency-Key", "k")
				e.ServeHTTP(rec, req)
				if rec.Code != http.StatusNoContent {
					t.Errorf("got status %d, want 204", rec.Code)
				}
			}
		})
	}
}
