package main

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"regexp"
	"strconv"
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
// "order:<id>"; POST /orders/:id/payments too, inside the idempotency middleware.
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
	// A payment runs once per Idempotency-Key: a retry gets the stored response, a retry
	// while the first still runs waits for it, the key with another body is refused (422).
	// The keys are the clients': the Locker lets their fence counters expire (main.go).
	once, err := fencemw.IdempotencyConfig{
		Locker:   locker,
		Required: true, // no key, no payment: 400
		MaxWait:  2 * time.Second,
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
	// The key's middleware outside, the order's lock inside: a retry is answered from the
	// stored result without waiting for the order, and the payment's write is fenced by the
	// order's token, so a first attempt that stalled past its lease cannot write late. (The
	// amount is checked inside the key's middleware, which reads the body first; a refused
	// amount is stored like any answer below 500.)
	e.POST("/orders/:id/payments", func(c *echo.Context) error { return pay(c, orders) }, once, validAmount, fence)
	return e, nil
}

// amountKey is where validAmount leaves the payment's amount for the handler.
const amountKey = "amount"

// validAmount answers 400 unless the body is {"amount": <1 or more>}, and stores the amount
// under amountKey otherwise.
func validAmount(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c *echo.Context) error {
		var body struct {
			Amount int64 `json:"amount"`
		}
		if err := c.Bind(&body); err != nil {
			return err
		}
		if body.Amount < 1 {
			return echo.NewHTTPError(http.StatusBadRequest, "amount must be at least 1")
		}
		c.Set(amountKey, body.Amount)
		return next(c)
	}
}

// pay records a payment of an order under the order's lock, with a fenced write, and answers
// 201 with the payment and its Location (which the idempotency middleware stores and replays).
func pay(c *echo.Context, orders *orderBook) error {
	amount, _ := echo.ContextGet[int64](c, amountKey)
	token, _ := fencemw.TokenFromEcho(c) // the order's token
	id := c.Param("id")
	p, err := orders.pay(id, amount, token)
	switch {
	case errors.Is(err, errNoOrder):
		return echo.ErrNotFound
	case err != nil:
		// A newer holder wrote first (store.ErrStaleToken): the lock was lost. The Fence
		// middleware answers 503 with Retry-After, which the idempotency middleware does not
		// store, so the client's retry with the same key runs again.
		return err
	}
	c.Response().Header().Set(echo.HeaderLocation, "/orders/"+id+"/payments/"+strconv.Itoa(p.Number))
	return c.JSON(http.StatusCreated, p)
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
		return err // a newer holder wrote first: the Fence middleware answers 503, Retry-After: 1
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

// order is one order as the service shows it: its status, what was paid, and the token of its
// last write.
type order struct {
	ID     string `json:"id"`
	Status string `json:"status"`
	Paid   int64  `json:"paid"`
	Token  int64  `json:"token"`
}

// payment is one payment of an order.
type payment struct {
	Order  string `json:"order"`
	Number int    `json:"number"` // 1 for the order's first payment
	Amount int64  `json:"amount"`
	Token  int64  `json:"token"`
}

// errNoOrder is the error of a payment of an order that does not exist.
var errNoOrder = errors.New("no such order")

// orderBook keeps orders in memory. Every write goes through a store.Memory, which
// remembers per order the highest fencing token that wrote it and refuses writes with a
// lower one: the lock keeps writers apart, this check makes a late write harmless.
type orderBook struct {
	guard    store.Memory
	mu       sync.Mutex
	orders   map[string]order
	payments map[string]int // per order
}

func newOrderBook() *orderBook {
	return &orderBook{orders: map[string]order{}, payments: map[string]int{}}
}

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
		o.Paid = b.orders[o.ID].Paid
		b.orders[o.ID] = o
		return nil
	})
}

// pay adds a payment of amount to order id if token is at least the order's mark, and
// returns it; otherwise it writes nothing and returns an error matching store.ErrStaleToken,
// or errNoOrder.
func (b *orderBook) pay(id string, amount, token int64) (payment, error) {
	var p payment
	err := b.guard.Write(fencemw.ResourceName("order", id), token, func() error {
		b.mu.Lock()
		defer b.mu.Unlock()
		o, ok := b.orders[id]
		if !ok {
			return errNoOrder
		}
		b.payments[id]++
		p = payment{Order: id, Number: b.payments[id], Amount: amount, Token: token}
		o.Paid += amount
		o.Token = token
		b.orders[id] = o
		return nil
	})
	return p, err
}
