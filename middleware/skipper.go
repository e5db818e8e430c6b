package middleware

import (
	"github.com/fencekit/fencekit/internal/echofence"
	"github.com/labstack/echo/v4"
)

// SkipSafeMethods is a Skipper that skips the safe methods of RFC 9110 (GET, HEAD, OPTIONS
// and TRACE), so only requests that may change something take the lock. (Echo v4 does not
// know RFC 10008's QUERY, which middleware-v5's SkipSafeMethods skips too.)
func SkipSafeMethods(c echo.Context) bool {
	return echofence.SafeMethod(c.Request().Method, false)
}

// SharedSafeMethods is a [Config.Shared] function that makes the requests with the methods
// that only read, GET, HEAD and OPTIONS, take the lock shared: they run together, and a
// request with any other method runs alone.
func SharedSafeMethods(c echo.Context) bool {
	return echofence.ReadMethod(c.Request().Method, false)
}
