package echofencetest

import (
	"log/slog"
	"net/http"

	"github.com/labstack/echo/v5"
	"github.com/labstack/echo/v5/middleware"

	fencemw "github.com/fencekit/fencekit/middleware-v5"
)

// V5 returns the driver of package middleware-v5, for Echo v5.
func V5() Driver {
	return &adapter[*echo.Context, middleware.Skipper, echo.HandlerFunc, echo.MiddlewareFunc, fencemw.Config,
		error, fencemw.IdempotencyConfig, *echo.Echo, *echo.Group, echo.RouteInfo, echo.RouteInfo]{
		major: "v5",
		api: api[*echo.Context, middleware.Skipper, echo.MiddlewareFunc, fencemw.Config, error, fencemw.IdempotencyConfig]{
			fencemw.Fence, fencemw.FenceWithConfig, fencemw.DefaultConfig, fencemw.SkipSafeMethods,
			fencemw.DefaultErrorHandler, fencemw.DefaultDenyHandler, fencemw.DefaultLostHandler, fencemw.NewHTTPError, fencemw.TokenFromEcho,
			fencemw.MaxKeyLen, fencemw.DefaultKeyLookup, fencemw.DefaultContextKey,
			fencemw.Idempotent, fencemw.IdempotentWithConfig, fencemw.DefaultFingerprint,
			fencemw.ErrKeyReused, fencemw.ErrBodyTooLarge,
			func(c *echo.Context) http.Header { return c.Response().Header() },
			fencemw.SharedSafeMethods},
		newEcho: func(record func(error)) *echo.Echo {
			e := echo.New()
			e.Logger = slog.New(slog.DiscardHandler)
			exposing := echo.DefaultHTTPErrorHandler(true) // puts internal errors in the body
			e.HTTPErrorHandler = func(c *echo.Context, err error) {
				record(err)
				exposing(c, err)
			}
			e.Use(recoverV5())
			return e
		},
		recoverer:   recoverV5,
		statusError: func(code int) error { return echo.NewHTTPError(code, "") },
		// Echo v5 reads the status of any error in the chain with a StatusCode method.
		httpStatus: echo.StatusCode,
		query:      true, // echo.QUERY (TestQueryMethod checks that it is echofence.MethodQuery)
	}
}

func recoverV5() echo.MiddlewareFunc {
	return middleware.RecoverWithConfig(middleware.RecoverConfig{DisablePrintStack: true})
}
