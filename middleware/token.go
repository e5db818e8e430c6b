package middleware

import (
	"github.com/labstack/echo/v4"

	"github.com/fencekit/fencekit/internal/echofence"
)

// TokenFromEcho returns the fencing token of the lock the Fence middleware holds for the
// request, read from the request's context, so it does not depend on [Config.ContextKey]:
// the innermost Fence's, also inside the [Idempotent] middleware (whose lock fences the stored
// response, not the handler's writes). The second result is false outside a locked handler,
// and when Fences hold locks of more than one resource (a KeysExtractor, or nested Fences of
// different resources), whose tokens come from unrelated counters: use [fencing.TokenFor]
// with the resource whose writes the token fences. After the handler returns, read
// c.Get(ContextKey) instead.
func TokenFromEcho(c echo.Context) (int64, bool) {
	return echofence.Token(c.Request().Context())
}
