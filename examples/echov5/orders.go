package main

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"regexp"
	"sync"
	"time"

	"github.com/labstack/echo/v5"
	"github.com/labstack/echo/v5/middleware"

	"github.com/fencekit/fencekit/fencing"
	fencemw "github.com/fencekit/fencekit/middleware-v5"
	"github.com/fencekit/fencekit/store"
)

// work is how long an update "takes": the time between reading an order's status and
// writing the new one, during which the order must not change under the handler.
const work = 2 * time.Millisecond

// idPattern is what an order id looks like. Anything else is answered 400 before a lock is
// taken, so a client cannot choose the length, or the bytes, of a name in Redis.
var idPattern = regexp.MustCompile(`^[0-9]{1,20}$`)

// newService returns the Echo service. PUT /orders/:id waits up to two seconds for the lock
// "order:<id>".
func newService(locker *fencing.Locker, orders *orderBook, logger *slog.Logger) (*echo.Echo, error) {
	fence, err := fencemw.Config{
		Locker:       locker,
		Namespace:    "order", // the lock of order 42 is "order:42", the name a worker would use
		KeyExtractor: orderID,
		MaxWait:      2 * time.Second,
		TTL:          10 * time.Second,
		TokenHeader:  "Fencing-Token",
	}.ToMiddleware()
	if err != nil {
		return nil, err
	}
	e := echo.New()
	e.Logger = logger
	e.Use(middleware.Recover())
	e.GET("/orders/:id", func(c *echo.Context) error {
		id, err := orderID(c)
		if err != nil {
			return echo.ErrBadRequest.Wrap(err)
		}
		o, ok := orders.get(id)
		if !ok {
			return echo.ErrNotFound
		}
		return c.JSON(http.StatusOK, o)
	})
	// The body is checked before the lock is taken: a bad request uses up no token and
	// never waits for the order.
	e.PUT("/orders/:id", func(c *echo.Context) error { return update(c, orders) }, validStatus, fence)
	return e, nil
}

// orderID is the middleware's KeyExtractor: the path parameter id, if it is an order id.
func orderID(c *echo.Context) (string, error) {
	if id := c.Param("id"); idPattern.MatchString(id) {
		return id, nil
	}
	return "", errors.New("an order id is 1 to 20 digits")
}

// statusKey is where validStatus leaves the requested status for the handler.
const statusKey = "status"

// validStatus answers 400 unless the body is {"status": "<a known status>"}, and stores the
// status under statusKey otherwise.
func validStatus(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c *echo.Context) error {
		var body struct {
			Status string `json:"status"`
		}
		if err := c.Bind(&body); err != nil {
			return err
		}
		switch body.Status {
		case "pending", "paid", "shipped", "cancelled":
		default:
			return echo.NewHTTPError(http.StatusBadRequest, "status must be pending, paid, shipped or cancelled")
		}
		c.Set(statusKey, body.Status)
		return next(c)
	}
}

// update moves the order to the requested status under its lock: a read, some work, and a
// fenced write.
func update(c *echo.Context, orders *orderBook) error {
	status, _ := echo.ContextGet[string](c, statusKey)
	token, _ := fencemw.TokenFromEcho(c)
	id := c.Param("id")
	ctx := c.Request().Context()

	current, ok := orders.get(id)
	from := "new"
	if ok {
		from = current.Status
	}
	if !allowed(from, status) {
		return echo.NewHTTPError(http.StatusConflict, "an order cannot move from "+from+" to "+status)
	}
	select {
	case <-time.After(work):
	case <-ctx.Done():
		// The client left, or the lock was lost (the cause matches fencing.ErrNotHeld).
		// NewHTTPError keeps the cause out of the body.
		return fencemw.NewHTTPError(http.StatusServiceUnavailable, context.Cause(ctx))
	}
	o := order{ID: id, Status: status, Token: token}
	if err := orders.set(o); err != nil {
		return fencemw.NewHTTPError(http.StatusConflict, err) // a newer holder wrote first
	}
	return c.JSON(http.StatusOK, o)
}

// allowed reports whether an order may move from one status to another; an order that does
// not exist yet is "new".
func allowed(from, to string) bool {
	switch from + ">" + to {
	case "new>pending", "new>paid", "pending>paid", "pending>cancelled", "paid>shipped", "paid>cancelled":
		return true
	}
	return false
}

// order is one order as the service shows it: its status and the token of its last write.
type order struct {
	ID     string `json:"id"`
	Status string `json:"status"`
	Token  int64  `json:"token"`
}

// orderBook keeps orders in memory. Every write goes through a store.Memory, which
// remembers per order the highest fencing token that wrote it and refuses writes with a
// lower one: the lock keeps writers apart, this check makes a late write harmless.
type orderBook struct {
	guard  store.Memory
	mu     sync.Mutex
	orders map[string]order
}

func newOrderBook() *orderBook { return &orderBook{orders: map[string]order{}} }

func (b *orderBook) get(id string) (order, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	o, ok := b.orders[id]
	return o, ok
}

// set writes o if its token is at least the order's mark; otherwise it writes nothing and
// returns an error matching store.ErrStaleToken.
func (b *orderBook) set(o order) error {
	// The record is named as its lock is: fencemw.ResourceName gives the middleware's name.
	return b.guard.Write(fencemw.ResourceName("order", o.ID), o.Token, func() error {
		b.mu.Lock()
		defer b.mu.Unlock()
		b.orders[o.ID] = o
		return nil
	})
}
