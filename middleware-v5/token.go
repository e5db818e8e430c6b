package middleware

import (
	"github.com/labstack/echo/v5"

	"github.com/fencekit/fencekit/fencing"
)

// TokenFromEcho returns the fencing token of the innermost lock the middleware holds for
// the request, read from the request's context (as [fencing.TokenFromContext] does), so it
// does not depend on [Config.ContextKey]. The second result is false outside a locked
// handler. After the handler returns, read echo.ContextGet[int64](c, ContextKey) instead.
func TokenFromEcho(c *echo.Context) (int64, bool) {
	return fencing.TokenFromContext(c.Request().Context())
}
