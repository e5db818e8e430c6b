package main

import (
	"context"
	"errors"
	"math"
	"net/http"
	"regexp"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	"go.opentelemetry.io/otel/trace"

	"github.com/fencekit/fencekit/fencing"
	fencemw "github.com/fencekit/fencekit/middleware"
)

// work is how long a write "takes": the time between reading a balance and writing the new
// one, during which the account must not change under the handler.
const work = 2 * time.Millisecond

// newService returns the Echo service: deposits wait up to ten seconds for the account's
// lock, withdrawals try it once, and both lock "account:<id>".
//
// Every request gets a server span from tp, under which the lock's spans nest (with
// FENCEKIT_TRACE=stdout they are printed; otherwise tp traces nothing).
func newService(locker *fencing.Locker, store *ledger, tp trace.TracerProvider) (*echo.Echo, error) {
	wait, err := fencemw.Config{
		Locker:       locker,
		Namespace:    "account",
		KeyExtractor: accountID,
		MaxWait:      10 * time.Second,
		TTL:          5 * time.Second,
		TokenHeader:  "Fencing-Token",
	}.ToMiddleware()
	if err != nil {
		return nil, err
	}
	tryOnce, err := fencemw.Config{
		Locker:       locker,
		Namespace:    "account",
		KeyExtractor: accountID,
		TTL:          5 * time.Second,
		TokenHeader:  "Fencing-Token",
	}.ToMiddleware()
	if err != nil {
		return nil, err
	}

	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.Use(middleware.Recover())
	e.Use(requestSpan(tp.Tracer("github.com/fencekit/fencekit/examples/echoservice")))
	e.GET("/accounts/:id", func(c echo.Context) error {
		return c.JSON(http.StatusOK, map[string]int64{"balance": store.balance(c.Param("id"))})
	})
	// The amount is checked before the lock is taken: a bad request uses up no token and
	// never waits for the account.
	e.POST("/accounts/:id/deposit", func(c echo.Context) error { return move(c, store, +1) }, validAmount, wait)
	e.POST("/accounts/:id/withdraw", func(c echo.Context) error { return move(c, store, -1) }, validAmount, tryOnce)
	return e, nil
}

// accountPattern is what an account id looks like. Anything else is answered 400 before a
// lock is taken, so a client cannot choose the length, or the bytes, of a name in Redis.
var accountPattern = regexp.MustCompile(`^[a-z0-9-]{1,32}$`)

// accountID is the middleware's KeyExtractor: the path parameter id, if it is an account id.
func accountID(c echo.Context) (string, error) {
	if id := c.Param("id"); accountPattern.MatchString(id) {
		return id, nil
	}
	return "", errors.New("an account id is 1 to 32 lower-case letters, digits or '-'")
}

// amountKey is where validAmount leaves the parsed amount for the handler.
const amountKey = "amount"

// validAmount answers 400 unless the query parameter amount is a positive integer that
// fits in an int64, and stores it under amountKey otherwise.
func validAmount(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		amount, err := strconv.ParseInt(c.QueryParam("amount"), 10, 64)
		if err != nil || amount <= 0 {
			return echo.NewHTTPError(http.StatusBadRequest, "amount must be a positive integer below 2^63")
		}
		c.Set(amountKey, amount)
		return next(c)
	}
}

// move adds sign × amount to the account: a read, some work, and a fenced write. It
// answers 409 when a withdrawal exceeds the balance and 422 when a deposit would take the
// balance past the largest int64.
func move(c echo.Context, store *ledger, sign int64) error {
	amount, _ := c.Get(amountKey).(int64)
	token, _ := fencemw.TokenFromEcho(c)
	id := c.Param("id")
	ctx := c.Request().Context()

	current := store.balance(id)
	if sign > 0 && current > math.MaxInt64-amount {
		return echo.NewHTTPError(http.StatusUnprocessableEntity, "the balance would overflow")
	}
	balance := current + sign*amount
	if balance < 0 {
		return echo.NewHTTPError(http.StatusConflict, "insufficient funds")
	}
	select {
	case <-time.After(work):
	case <-ctx.Done():
		// The client left, or the lock was lost (the cause matches fencing.ErrNotHeld).
		// NewHTTPError keeps the cause out of the body, even with e.Debug set.
		return fencemw.NewHTTPError(http.StatusServiceUnavailable, context.Cause(ctx))
	}
	if err := store.set(id, token, balance); err != nil {
		return err // a newer holder wrote first: the Fence middleware answers 503, Retry-After: 1
	}
	return c.JSON(http.StatusOK, map[string]int64{"balance": balance, "token": token})
}

// requestSpan starts a server span around every request, as otelecho would, and puts it in
// the request's context.
func requestSpan(tracer trace.Tracer) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			req := c.Request()
			ctx, span := tracer.Start(req.Context(), req.Method+" "+c.Path(), trace.WithSpanKind(trace.SpanKindServer))
			defer span.End()
			c.SetRequest(req.WithContext(ctx))
			return next(c)
		}
	}
}
