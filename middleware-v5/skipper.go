package middleware

import (
	"github.com/labstack/echo/v5"

	"github.com/fencekit/fencekit/internal/echofence"
)

// SkipSafeMethods is a Skipper for the safe methods, RFC 9110's GET, HEAD, OPTIONS and TRACE
// and RFC 10008's QUERY (echo.QUERY): only the methods that may change state take the lock.
func SkipSafeMethods(c *echo.Context) bool {
	return echofence.SafeMethod(c.Request().Method, true)
}

// SharedSafeMethods is a [Config.Shared] function that makes the requests with the methods
// that only read, GET, HEAD, OPTIONS and QUERY (echo.QUERY), take the lock shared: they run
// together, and a request with any other method runs alone.
func SharedSafeMethods(c *echo.Context) bool {
	return echofence.ReadMethod(c.Request().Method, true)
}
