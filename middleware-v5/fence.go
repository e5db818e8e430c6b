package middleware

import (
	"net/http"

	"github.com/labstack/echo/v5"
	"github.com/labstack/echo/v5/middleware"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/internal/echofence"
)

// glue is what Echo v5 gives the shared behaviour of package echofence: the response header
// (c.Response() is an http.ResponseWriter in v5, its Header the one the client gets),
// Echo's key extractors, this package's default handlers, and for the idempotency middleware
// the path values, the response it captures and Echo's error handler.
func glue() echofence.Glue[*echo.Context] {
	return echofence.Glue[*echo.Context]{
		Header: func(c *echo.Context) http.Header { return c.Response().Header() },
		Extractors: func(lookup string) ([]func(c *echo.Context) ([]string, error), error) {
			// Only the first value of a source counts: a limit of 1.
			extractors, err := middleware.CreateExtractors(lookup, 1)
			values := make([]func(c *echo.Context) ([]string, error), len(extractors))
			for i, extract := range extractors {
				values[i] = func(c *echo.Context) ([]string, error) {
					v, _, err := extract(c)
					return v, err
				}
			}
			return values, err
		},
		ErrorHandler: DefaultErrorHandler,
		DenyHandler:  DefaultDenyHandler,
		LostHandler:  DefaultLostHandler,
		Committed:    committed,
		HasStatus:    func(err error) bool { return statusError(err) != nil },
		Query:        true, // echo.QUERY
		PathValues:   pathValues,
		Response:     func(c *echo.Context) http.ResponseWriter { return c.Response() },
		Swap: func(c *echo.Context, w http.ResponseWriter) func() {
			client := c.Response()
			c.SetResponse(echo.NewResponse(w, c.Logger()))
			return func() { c.SetResponse(client) }
		},
		HandleError: func(c *echo.Context, err error) {
			if e := c.Echo(); e != nil && e.HTTPErrorHandler != nil {
				e.HTTPErrorHandler(c, err)
				return
			}
			echo.DefaultHTTPErrorHandler(false)(c, err)
		},
		IdempotencyErrorHandler: DefaultIdempotencyErrorHandler,
	}
}

// committed reports whether c's response has been written, and true when c.Response() is
// a writer that does not unwrap to Echo's *echo.Response, which alone can tell.
func committed(c *echo.Context) bool {
	r, err := echo.UnwrapResponse(c.Response())
	return err != nil || r.Committed
}

// Fence is FenceWithConfig of [DefaultConfig] with locker. Like Echo v5's own constructors
// it panics on a configuration ToMiddleware refuses (a nil, closed or misconfigured Locker);
// call [Config.ToMiddleware] to get an error instead.
func Fence(locker *fencing.Locker) echo.MiddlewareFunc {
	return FenceWithConfig(echofence.WithLocker(DefaultConfig, locker))
}
