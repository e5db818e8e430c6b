package middleware

import (
	"errors"
	"net/http"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/internal/echofence"
	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
)

// glue is what Echo v4 gives the shared behaviour of package echofence: the response header,
// Echo's key extractors, this package's default handlers, and for the idempotency middleware
// the path parameters, the response it captures and Echo's error handler.
func glue() echofence.Glue[echo.Context] {
	return echofence.Glue[echo.Context]{
		Header: func(c echo.Context) http.Header { return c.Response().Header() },
		Extractors: func(lookup string) ([]func(c echo.Context) ([]string, error), error) {
			extractors, err := middleware.CreateExtractors(lookup)
			values := make([]func(c echo.Context) ([]string, error), len(extractors))
			for i, extract := range extractors {
				values[i] = extract
			}
			return values, err
		},
		ErrorHandler: DefaultErrorHandler,
		DenyHandler:  DefaultDenyHandler,
		LostHandler:  DefaultLostHandler,
		Committed:    func(c echo.Context) bool { return c.Response().Committed },
		HasStatus: func(err error) bool {
			var he *echo.HTTPError
			return errors.As(err, &he)
		},
		PathValues: pathValues,
		Response:   func(c echo.Context) http.ResponseWriter { return c.Response() },
		Swap: func(c echo.Context, w http.ResponseWriter) func() {
			client := c.Response()
			c.SetResponse(echo.NewResponse(w, c.Echo()))
			return func() { c.SetResponse(client) }
		},
		HandleError:             func(c echo.Context, err error) { c.Error(err) },
		IdempotencyErrorHandler: DefaultIdempotencyErrorHandler,
	}
}

// Fence returns the middleware with [DefaultConfig] and locker: the key is the path
// parameter "id", the resource is busy after one attempt, and the lease is the Locker's.
// It panics when locker is nil or unusable (see [Config.ToMiddleware]), as Echo's own
// constructors do; use ToMiddleware to get an error instead.
func Fence(locker *fencing.Locker) echo.MiddlewareFunc {
	return FenceWithConfig(echofence.WithLocker(DefaultConfig, locker))
}
