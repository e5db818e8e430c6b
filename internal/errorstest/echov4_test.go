package errorstest

import (
	"context"
	"errors"
	"io"
	"net/http"

	"github.com/labstack/echo/v4"

	fencemw "github.com/fencekit/fencekit/middleware"
)

// echoV4 is package middleware, for Echo v4.
var echoV4 = echoMajor{
	pkg: "middleware",
	fence: func(c fenceConfig) (any, error) {
		cfg := fencemw.Config{Locker: c.locker, TTL: c.ttl, Namespace: c.namespace}
		if c.keys != nil {
			cfg.KeysExtractor = func(echo.Context) ([]string, error) { return c.keys, nil }
		}
		if c.keyErr != nil {
			cfg.KeyExtractor = func(echo.Context) (string, error) { return "", c.keyErr }
		}
		if c.shared {
			cfg.Shared = func(echo.Context) bool { return true }
		}
		return cfg.ToMiddleware()
	},
	idem: func(c idemConfig) (any, error) {
		cfg := fencemw.IdempotencyConfig{Locker: c.locker, MaxBody: c.maxBody, Required: c.required}
		if c.scopeErr != nil {
			cfg.Scope = func(echo.Context) (string, error) { return "", c.scopeErr }
		}
		return cfg.ToMiddleware()
	},
	serve: func(route string, mw any, h func(ctx context.Context) error) http.Handler {
		e := echo.New()
		e.Logger.SetOutput(io.Discard)
		e.HTTPErrorHandler = func(err error, c echo.Context) {
			record(c.Request().Context(), err)
			e.DefaultHTTPErrorHandler(err, c)
		}
		e.Any(route, func(c echo.Context) error { return h(c.Request().Context()) }, mw.(echo.MiddlewareFunc))
		return e
	},
	cause: func(err error) error {
		var he *echo.HTTPError
		if errors.As(err, &he) && he.Internal != nil {
			return he.Internal
		}
		return err
	},
	keyReused:    fencemw.ErrKeyReused,
	bodyTooLarge: fencemw.ErrBodyTooLarge,
}
