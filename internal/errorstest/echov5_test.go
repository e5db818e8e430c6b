package errorstest

import (
	"context"
	"errors"
	"log/slog"
	"net/http"

	"github.com/labstack/echo/v5"

	fencemw "github.com/fencekit/fencekit/middleware-v5"
)

// echoV5 is package middleware-v5, for Echo v5.
var echoV5 = echoMajor{
	pkg: "middleware-v5",
	fence: func(c fenceConfig) (any, error) {
		cfg := fencemw.Config{Locker: c.locker, TTL: c.ttl, Namespace: c.namespace}
		if c.keys != nil {
			cfg.KeysExtractor = func(*echo.Context) ([]string, error) { return c.keys, nil }
		}
		if c.keyErr != nil {
			cfg.KeyExtractor = func(*echo.Context) (string, error) { return "", c.keyErr }
		}
		if c.shared {
			cfg.Shared = func(*echo.Context) bool { return true }
		}
		return cfg.ToMiddleware()
	},
	idem: func(c idemConfig) (any, error) {
		cfg := fencemw.IdempotencyConfig{Locker: c.locker, MaxBody: c.maxBody, Required: c.required}
		if c.scopeErr != nil {
			cfg.Scope = func(*echo.Context) (string, error) { return "", c.scopeErr }
		}
		return cfg.ToMiddleware()
	},
	serve: func(route string, mw any, h func(ctx context.Context) error) http.Handler {
		e := echo.New()
		e.Logger = slog.New(slog.DiscardHandler)
		answer := echo.DefaultHTTPErrorHandler(false)
		e.HTTPErrorHandler = func(c *echo.Context, err error) {
			record(c.Request().Context(), err)
			answer(c, err)
		}
		e.Any(route, func(c *echo.Context) error { return h(c.Request().Context()) }, mw.(echo.MiddlewareFunc))
		return e
	},
	cause: func(err error) error {
		// The package's HTTP errors are not *echo.HTTPError (see its NewHTTPError): an error
		// with a status whose cause is the middleware's.
		var coded interface {
			error
			StatusCode() int
			Unwrap() error
		}
		if errors.As(err, &coded) && coded.Unwrap() != nil {
			return coded.Unwrap()
		}
		return err
	},
	keyReused:    fencemw.ErrKeyReused,
	bodyTooLarge: fencemw.ErrBodyTooLarge,
}
