package middleware_test

import (
	"io"
	"net/http"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/internal/echofence"
	"github.com/fencekit/fencekit/internal/testkit/echofencetest"
	fencemw "github.com/fencekit/fencekit/middleware"
)

// TestBehaviour runs the behaviour suite that the Echo v5 package runs too.
func TestBehaviour(t *testing.T) {
	t.Parallel()
	echofencetest.Run(t, major{})
}

// major is this package as the behaviour suite drives it.
type major struct{}

// std holds what echofencetest.Settings sets where a Config asks for the package's own.
var std = echofence.Settings[echo.Context, middleware.Skipper]{Skipper: fencemw.SkipSafeMethods, Shared: fencemw.SharedSafeMethods,
	ErrorHandler: fencemw.DefaultErrorHandler, DenyHandler: fencemw.DefaultDenyHandler, LostHandler: fencemw.DefaultLostHandler}

func config(cfg echofencetest.Config) fencemw.Config {
	return fencemw.Config(echofencetest.Settings(cfg, request, std))
}

func idemConfig(cfg echofencetest.IdemConfig) fencemw.IdempotencyConfig {
	return fencemw.IdempotencyConfig(echofencetest.IdemSettings[echo.Context, middleware.Skipper](cfg, request))
}

func (major) NewEcho(record func(err error)) echofencetest.Echo {
	e := echo.New()
	e.Debug = true // the default error handler then shows internal errors
	e.Logger.SetOutput(io.Discard)
	e.HTTPErrorHandler = func(err error, c echo.Context) {
		record(err)
		e.DefaultHTTPErrorHandler(err, c)
	}
	return server{routes{e}, e}
}

func (major) ToMiddleware(cfg echofencetest.Config) (echofencetest.Middleware, error) {
	return echofencetest.Built(config(cfg).ToMiddleware())
}

func (major) FenceWithConfig(cfg echofencetest.Config) echofencetest.Middleware {
	return fencemw.FenceWithConfig(config(cfg))
}

func (major) Fence(l *fencing.Locker) echofencetest.Middleware { return fencemw.Fence(l) }

func (major) IdempotencyToMiddleware(cfg echofencetest.IdemConfig) (echofencetest.Middleware, error) {
	return echofencetest.Built(idemConfig(cfg).ToMiddleware())
}

func (major) IdempotentWithConfig(cfg echofencetest.IdemConfig) echofencetest.Middleware {
	return fencemw.IdempotentWithConfig(idemConfig(cfg))
}

func (major) Idempotent(l *fencing.Locker) echofencetest.Middleware { return fencemw.Idempotent(l) }

func (major) DefaultConfig(l *fencing.Locker) (echofencetest.Middleware, error) {
	cfg := fencemw.DefaultConfig
	cfg.Locker = l
	return echofencetest.Built(cfg.ToMiddleware())
}

func (major) Recover() echofencetest.Middleware {
	return middleware.RecoverWithConfig(middleware.RecoverConfig{DisablePrintStack: true})
}

func (major) Around(fn func(r echofencetest.Request, next func() error) error) echofencetest.Middleware {
	return echo.MiddlewareFunc(func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error { return fn(request(c), func() error { return next(c) }) }
	})
}

func (major) NewHTTPError(code int, err error) error { return fencemw.NewHTTPError(code, err) }

func (major) StatusError(code int) error { return echo.NewHTTPError(code) }

// HTTPStatus reads err as Echo v4's default error handler does, with a type assertion: a
// wrapped *echo.HTTPError is a 500.
func (major) HTTPStatus(err error) int {
	if he, ok := err.(*echo.HTTPError); ok { //nolint:errorlint // as Echo v4 reads it
		return he.Code
	}
	return 0
}

func (major) Query() bool { return false } // Echo v4 does not know QUERY

func (major) Constants() (string, string, int) {
	return fencemw.DefaultKeyLookup, fencemw.DefaultContextKey, fencemw.MaxKeyLen
}

func (major) IdempotencyErrors() (error, error) { return fencemw.ErrKeyReused, fencemw.ErrBodyTooLarge }

// routes is an *echo.Echo or an *echo.Group as an echofencetest.Router.
type routes struct {
	g interface {
		Add(method, path string, h echo.HandlerFunc, m ...echo.MiddlewareFunc) *echo.Route
		Any(path string, h echo.HandlerFunc, m ...echo.MiddlewareFunc) []*echo.Route
	}
}

func (r routes) Add(method, path string, h echofencetest.Handler, mws ...echofencetest.Middleware) {
	r.g.Add(method, path, handler(h), echofencetest.Middlewares[echo.MiddlewareFunc](mws)...)
}

func (r routes) Any(path string, h echofencetest.Handler, mws ...echofencetest.Middleware) {
	r.g.Any(path, handler(h), echofencetest.Middlewares[echo.MiddlewareFunc](mws)...)
}

// server is an *echo.Echo as an echofencetest.Echo.
type server struct {
	routes
	e *echo.Echo
}

func (s server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.e.ServeHTTP(w, r) }

func (s server) Group(prefix string, mws ...echofencetest.Middleware) echofencetest.Router {
	return routes{s.e.Group(prefix, echofencetest.Middlewares[echo.MiddlewareFunc](mws)...)}
}

func (s server) Use(mws ...echofencetest.Middleware) {
	s.e.Use(echofencetest.Middlewares[echo.MiddlewareFunc](mws)...)
}

func handler(h echofencetest.Handler) echo.HandlerFunc {
	return func(c echo.Context) error { return h(request(c)) }
}

// echoContext is an echo.Context as an echofencetest.Request.
type echoContext struct{ echo.Context }

func request(c echo.Context) echofencetest.Request { return echoContext{c} }

func (c echoContext) Token() (int64, bool) { return fencemw.TokenFromEcho(c.Context) }
func (c echoContext) Header() http.Header  { return c.Response().Header() }
func (c echoContext) DefaultFingerprint() (string, error) {
	return fencemw.DefaultFingerprint(c.Context)
}
