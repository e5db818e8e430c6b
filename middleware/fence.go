package middleware

import (
	"context"
	"errors"
	"net/http"
	"strconv"

	"github.com/fencekit/fencekit/fencing"
	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
)

// fence is a checked Config with its defaults applied. It is never modified after newFence,
// so one fence serves concurrent requests.
type fence struct {
	skipper      middleware.Skipper
	locker       *fencing.Locker
	opts         []fencing.Option // per call: WithMaxWait, and WithTTL when set
	extract      func(c echo.Context) (string, error)
	namespace    string
	contextKey   string
	tokenHeader  string
	errorHandler func(c echo.Context, err error) error
	denyHandler  func(c echo.Context, resource string, err error) error
}

func (f *fence) middleware(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error { return f.serve(c, next) }
}

// serve runs one request: it names the resource, takes the lock through Locker.Do and runs
// next inside Do, or builds the error response.
func (f *fence) serve(c echo.Context, next echo.HandlerFunc) error {
	if f.skipper(c) {
		return next(c)
	}
	resource, err := f.resource(c)
	if err != nil {
		return f.errorHandler(c, err)
	}
	req := c.Request()
	if token, ok := heldToken(req.Context(), f.locker, resource); ok {
		// An outer middleware holds this lock for the request: run under it.
		f.expose(c, token)
		return next(c)
	}

	// Do returns fn's error joined with ErrNotHeld when the lock was lost, and release
	// errors; the handler's own result is kept apart so it reaches Echo unchanged. A panic
	// in the handler goes through Do, which releases the lock, on to Echo's Recover.
	var (
		ran    bool
		result error
	)
	err = f.locker.Do(req.Context(), resource, func(ctx context.Context) error {
		ran = true
		result = f.run(ctx, c, next, req, resource)
		return result
	}, f.opts...)
	switch {
	case ran:
		return result
	case errors.Is(err, fencing.ErrNotAcquired):
		c.Response().Header().Set(echo.HeaderRetryAfter, retryAfter(err))
		return f.denyHandler(c, resource, err)
	}
	return f.errorHandler(c, err)
}

// run calls next with the work context of Do as the request's context, and puts the
// original request back when next returns or panics.
func (f *fence) run(ctx context.Context, c echo.Context, next echo.HandlerFunc, req *http.Request, resource string) error {
	token, _ := fencing.TokenFromContext(ctx)
	f.expose(c, token)
	c.SetRequest(req.WithContext(withHeld(ctx, f.locker, resource, token)))
	defer c.SetRequest(req)
	return next(c)
}

// expose makes the token available to the handler: c.Get and the response header.
func (f *fence) expose(c echo.Context, token int64) {
	c.Set(f.contextKey, token)
	if f.tokenHeader != "" {
		c.Response().Header().Set(f.tokenHeader, strconv.FormatInt(token, 10))
	}
}
