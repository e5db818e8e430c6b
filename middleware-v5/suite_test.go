package middleware_test

import (
	"log/slog"
	"net/http"
	"testing"

	"github.com/labstack/echo/v5"
	"github.com/labstack/echo/v5/middleware"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/internal/echofence"
	"github.com/fencekit/fencekit/internal/testkit/echofencetest"
	fencemw "github.com/fencekit/fencekit/middleware-v5"
)

// TestBehaviour runs the behaviour suite that the Echo v4 package runs too.
func TestBehaviour(t *testing.T) {
	echofencetest.Run(t, major{})
}

// major is this package as the behaviour suite drives it.
type major struct{}

// std holds what echofencetest.Settings sets where a Config asks for the package's own.
var std = echofence.Settings[*echo.Context, middleware.Skipper]{Skipper: fencemw.SkipSafeMethods, Shared: fencemw.SharedSafeMethods,
	ErrorHandler: fencemw.DefaultErrorHandler, DenyHandler: fencemw.DefaultDenyHandler, LostHandler: fencemw.DefaultLostHandler}

func config(cfg echofencetest.Config) fencemw.Config {
	return fencemw.Config(echofencetest.Settings(cfg, request, std))
}

func idemConfig(cfg echofencetest.IdemConfig) fencemw.IdempotencyConfig {
	return fencemw.IdempotencyConfig(echofencetest.IdemSettings[*echo.Context, middleware.Skipper](cfg, request))
}

func (major) NewEcho(record func(err error)) echofencetest.Echo {
	e := echo.New()
	e.Logger = slog.New(slog.DiscardHandler)
	exposing := echo.DefaultHTTPErrorHandler(true) // puts internal errors in the body
	e.HTTPErrorHandler = func(c *echo.Context, err error) {
		record(err)
		exposing(c, err)
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
		return func(c *echo.Context) error { return fn(request(c), func() error { return next(c) }) }
	})
}

func (major) NewHTTPError(code int, err error) error { return fencemw.NewHTTPError(code, err) }

func (major) StatusError(code int) error { return echo.NewHTTPError(code, "") }

// HTTPStatus reads err as Echo v5's default error handler does: the status of any error in
// the chain with a StatusCode method.
func (major) HTTPStatus(err error) int { return echo.StatusCode(err) }

func (major) Query() bool { return true } // echo.QUERY: TestQueryMethod checks it is echofence.MethodQuery

func (major) Constants() (string, string, int) {
	return fencemw.DefaultKeyLookup, fencemw.DefaultContextKey, fencemw.MaxKeyLen
}

func (major) IdempotencyErrors() (error, error) { return fencemw.ErrKeyReused, fencemw.ErrBodyTooLarge }

// routes is an *echo.Echo or an *echo.Group as an echofencetest.Router.
type routes struct {
	g interface {
		Add(method, path string, h echo.HandlerFunc, m ...echo.MiddlewareFunc) echo.RouteInfo
		Any(path string, h echo.HandlerFunc, m ...echo.MiddlewareFunc) echo.RouteInfo
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
	return func(c *echo.Context) error { return h(request(c)) }
}

// echoContext is an *echo.Context as an echofencetest.Request.
type echoContext struct{ *echo.Context }

func request(c *echo.Context) echofencetest.Request { return echoContext{c} }

func (c echoContext) Token() (int64, bool) { return fencemw.TokenFromEcho(c.Context) }
func (c echoContext) Header() http.Header  { return c.Response().Header() }
func (c echoContext) DefaultFingerprint() (string, error) {
	return fencemw.DefaultFingerprint(c.Context)
}
