package echofencetest

import (
	"io"
	"net/http"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"

	fencemw "github.com/fencekit/fencekit/middleware"
)

// V4 returns the driver of package middleware, for Echo v4.
func V4() Driver {
	return &adapter[echo.Context, middleware.Skipper, echo.HandlerFunc, echo.MiddlewareFunc, fencemw.Config,
		*echo.HTTPError, fencemw.IdempotencyConfig, *echo.Echo, *echo.Group, *echo.Route, []*echo.Route]{
		major: "v4",
		api: api[echo.Context, middleware.Skipper, echo.MiddlewareFunc, fencemw.Config, *echo.HTTPError, fencemw.IdempotencyConfig]{
			fencemw.Fence, fencemw.FenceWithConfig, fencemw.DefaultConfig, fencemw.SkipSafeMethods,
			fencemw.DefaultErrorHandler, fencemw.DefaultDenyHandler, fencemw.DefaultLostHandler, fencemw.NewHTTPError, fencemw.TokenFromEcho,
			fencemw.MaxKeyLen, fencemw.DefaultKeyLookup, fencemw.DefaultContextKey,
			fencemw.Idempotent, fencemw.IdempotentWithConfig, fencemw.DefaultFingerprint,
			fencemw.ErrKeyReused, fencemw.ErrBodyTooLarge,
			func(c echo.Context) http.Header { return c.Response().Header() },
			fencemw.SharedSafeMethods},
		newEcho: func(record func(error)) *echo.Echo {
			e := echo.New()
			e.Debug = true // the default error handler then shows internal errors
			e.Logger.SetOutput(io.Discard)
			e.HTTPErrorHandler = func(err error, c echo.Context) {
				record(err)
				e.DefaultHTTPErrorHandler(err, c)
			}
			e.Use(recoverV4())
			return e
		},
		recoverer:   recoverV4,
		statusError: func(code int) error { return echo.NewHTTPError(code) },
		// Echo v4's default error handler type-asserts: a wrapped *echo.HTTPError is a 500.
		httpStatus: func(err error) int {
			if he, ok := err.(*echo.HTTPError); ok { //nolint:errorlint // as Echo v4 reads it
				return he.Code
			}
			return 0
		},
	}
}

func recoverV4() echo.MiddlewareFunc {
	return middleware.RecoverWithConfig(middleware.RecoverConfig{DisablePrintStack: true})
}
