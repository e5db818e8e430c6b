package middleware

import (
	"github.com/fencekit/fencekit/internal/echofence"
	"github.com/labstack/echo/v4"
)

// SkipSafeMethods is a Skipper that skips the safe methods of RFC 9110 (GET, HEAD, OPTIONS
// and TRACE), so only requests that may change something take the lock.
func SkipSafeMethods(c echo.Context) bool {
	return echofence.SafeMethod(c.Request().Method)
}
