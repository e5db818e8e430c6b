package middleware_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/labstack/echo/v5"
	"github.com/labstack/echo/v5/middleware"
	"github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/fencing"
	fencemw "github.com/fencekit/fencekit/middleware-v5"
	"github.com/fencekit/fencekit/store"
)

// exampleRedis starts a stand-in for your Redis and returns it, a client for it, and a
// function that stops both.
func exampleRedis() (*miniredis.Miniredis, *redis.Client, func()) {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		panic(err)
	}
	client := redis.NewClient(&redis.Options{Addr: mr.Addr(), DisableIdentity: true})
	return mr, client, func() { _ = client.Close(); mr.Close() }
}

// show prints a response's status, the headers named and the body.
func show(rec *httptest.ResponseRecorder, headers ...string) {
	line := fmt.Sprint(rec.Code)
	for _, h := range headers {
		if v := rec.Header().Get(h); v != "" {
			line += " " + h + ": " + v
		}
	}
	fmt.Println(strings.TrimSpace(line + " " + rec.Body.String()))
}

func Example() {
	_, client, stop := exampleRedis()
	defer stop()

	locker := fencing.New(client)
	defer locker.Close()

	e := echo.New()
	e.Use(middleware.Recover())
	e.PUT("/orders/:id", func(c *echo.Context) error {
		// Pass the token with every write; the store refuses tokens lower than it has seen.
		token, _ := fencemw.TokenFromEcho(c)
		return c.String(http.StatusOK, fmt.Sprintf("order %s saved with token %d", c.Param("id"), token))
	}, fencemw.Fence(locker)) // locks "/orders/:id 42" for /orders/42, one request at a time

	put := func() {
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, httptest.NewRequest(http.MethodPut, "/orders/42", nil))
		show(rec, echo.HeaderRetryAfter)
	}
	put()
	// Another request, or another process, holds the order's lock for 3 seconds.
	lock, _ := locker.TryAcquire(context.Background(), "/orders/:id 42", fencing.WithTTL(3*time.Second))
	put()
	_ = lock.Release(context.Background())
	put()
	// Output:
	// 200 order 42 saved with token 1
	// 423 Retry-After: 3 {"message":"/orders/:id 42 is busy"}
	// 200 order 42 saved with token 3
}

// A Config is an echo.MiddlewareConfigurator: ToMiddleware returns the middleware, or the
// reason it cannot build one, where FenceWithConfig would panic.
func ExampleConfig() {
	_, client, stop := exampleRedis()
	defer stop()

	locker := fencing.New(client)
	defer locker.Close()

	var config echo.MiddlewareConfigurator = fencemw.Config{
		Locker:      locker,
		Skipper:     fencemw.SkipSafeMethods, // GET and HEAD run unlocked
		KeyLookup:   "header:X-Account",
		Namespace:   "account", // the lock is "account:<X-Account>", the name a worker uses too
		MaxWait:     100 * time.Millisecond,
		TokenHeader: "Fencing-Token",
	}
	fence, err := config.ToMiddleware()
	if err != nil {
		fmt.Println(err)
		return
	}
	e := echo.New()
	e.Group("/transfers", fence).POST("", func(c *echo.Context) error { return c.NoContent(http.StatusCreated) })

	for _, account := range []string{"acme", ""} {
		req := httptest.NewRequest(http.MethodPost, "/transfers", nil)
		req.Header.Set("X-Account", account)
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, req)
		show(rec, "Fencing-Token")
	}

	_, err = fencemw.Config{Locker: locker, MaxWait: -time.Second}.ToMiddleware()
	fmt.Println(err)
	// Output:
	// 201 Fencing-Token: 1
	// 400 {"message":"Bad Request"}
	// fencemw: negative MaxWait -1s
}

// A DenyHandler may answer 409 Conflict rather than 423 Locked; NewHTTPError keeps the
// cause out of the body, here under Echo's RFC 9457 error handler told to expose errors.
func ExampleNewHTTPError() {
	_, client, stop := exampleRedis()
	defer stop()

	locker := fencing.New(client)
	defer locker.Close()

	e := echo.New()
	e.HTTPErrorHandler = echo.ProblemDetailsHTTPErrorHandler(true)
	e.DELETE("/carts/:id", func(c *echo.Context) error { return c.NoContent(http.StatusNoContent) },
		fencemw.FenceWithConfig(fencemw.Config{
			Locker: locker,
			DenyHandler: func(c *echo.Context, resource string, err error) error {
				return fencemw.NewHTTPError(http.StatusConflict, err)
			},
		}))

	lock, _ := locker.TryAcquire(context.Background(), "/carts/:id 7", fencing.WithTTL(2*time.Second))
	defer lock.Release(context.Background())
	rec := httptest.NewRecorder()
	e.ServeHTTP(rec, httptest.NewRequest(http.MethodDelete, "/carts/7", nil))
	show(rec, echo.HeaderRetryAfter)
	// Output:
	// 409 Retry-After: 2 {"type":"about:blank","title":"Conflict","status":409}
}

// Resources named after what a client sends: the Locker lets idle fence counters expire, and
// a KeyExtractor admits only well-formed ids, so that neither the number nor the size of the
// counters left in Redis is up to the client (docs/echo.md, "Endpoints that take untrusted
// names").
func Example_untrustedNames() {
	mr, client, stop := exampleRedis()
	defer stop()

	// A counter that issued no token for an hour expires; a new one starts above every
	// token issued before (it implies fencing.WithServerTimeFloor).
	locker := fencing.New(client, fencing.WithCounterExpiry(time.Hour))
	defer locker.Close()

	orderID := regexp.MustCompile(`^[0-9]{1,20}$`)
	fence := fencemw.FenceWithConfig(fencemw.Config{
		Locker:    locker,
		Namespace: "order",
		KeyExtractor: func(c *echo.Context) (string, error) {
			if id := c.Param("id"); orderID.MatchString(id) {
				return id, nil
			}
			return "", errors.New("not an order id") // 400, nothing written to Redis
		},
	})
	e := echo.New()
	e.PUT("/orders/:id", func(c *echo.Context) error { return c.NoContent(http.StatusNoContent) }, fence)

	for _, id := range []string{"42", "x%27%3B%20DROP", strings.Repeat("9", 21)} {
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, httptest.NewRequest(http.MethodPut, "/orders/"+id, nil))
		fmt.Println(rec.Code)
	}
	// Order 42's counter (beside it, for 10 s, the record of its release).
	fmt.Println(client.Keys(context.Background(), "*:fence").Val(), mr.TTL("fencing:{order:42}:fence"))
	mr.FastForward(time.Hour)
	fmt.Println(mr.Keys())
	// Output:
	// 204
	// 400
	// 400
	// [fencing:{order:42}:fence] 1h0m0s
	// []
}

// The name a Namespace route locks, and the default name of a route, computed for code that
// must lock the same resource, such as a transfer or an Asynq task.
func ExampleResourceName() {
	fmt.Println(fencemw.ResourceName("account", "a1"))
	fmt.Println(fencemw.RouteResourceName("/orders/:id", "42"))
	// Output:
	// account:a1
	// /orders/:id 42
}

// The idempotency middleware outside, the account's lock inside: a payout runs once per
// Idempotency-Key, a retry gets the stored response without running the handler, and the
// same key with another request is refused. The handler's writes carry the account's token.
func ExampleIdempotent() {
	_, client, stop := exampleRedis()
	defer stop()

	// Accounts are few and known; idempotency keys are chosen by clients, and each names a
	// lock with a fence counter: their Locker lets idle counters expire.
	locker := fencing.New(client)
	defer locker.Close()
	keys := fencing.New(client, fencing.WithCounterExpiry(time.Hour))
	defer keys.Close()

	e := echo.New()
	e.POST("/accounts/:id/payouts", func(c *echo.Context) error {
		token, _ := fencemw.TokenFromEcho(c) // the account's: pass it with every write
		var payout struct {
			Amount int `json:"amount"`
		}
		if err := c.Bind(&payout); err != nil {
			return err
		}
		return c.JSON(http.StatusCreated, map[string]any{"account": c.Param("id"), "amount": payout.Amount, "token": token})
	},
		fencemw.Idempotent(keys), // outside: one run per key, its response stored for 24h
		fencemw.FenceWithConfig(fencemw.Config{Locker: locker, Namespace: "account", MaxWait: time.Second}))

	pay := func(key, body string) {
		req := httptest.NewRequest(http.MethodPost, "/accounts/acme/payouts", strings.NewReader(body))
		req.Header.Set(echo.HeaderContentType, echo.MIMEApplicationJSON)
		req.Header.Set("Idempotency-Key", key)
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, req)
		show(rec, "Idempotent-Replayed")
	}
	pay("8e03978e", `{"amount":100}`)
	pay("8e03978e", `{"amount":100}`) // a retry after a timeout
	pay("8e03978e", `{"amount":500}`) // the same key for another payout
	// Output:
	// 201 {"account":"acme","amount":100,"token":1}
	// 201 Idempotent-Replayed: true {"account":"acme","amount":100,"token":1}
	// 422 {"type":"about:blank","title":"Unprocessable Entity","status":422,"detail":"This Idempotency-Key was used with another request (method, route, path values or body)."}
}

// A DenyHandler that says what is busy in its own words, without rebuilding the error.
func ExampleNewHTTPErrorMessage() {
	_, client, stop := exampleRedis()
	defer stop()

	locker := fencing.New(client)
	defer locker.Close()

	e := echo.New()
	e.POST("/payouts/:id", func(c *echo.Context) error { return c.NoContent(http.StatusNoContent) },
		fencemw.FenceWithConfig(fencemw.Config{
			Locker:    locker,
			Namespace: "payout",
			DenyHandler: func(c *echo.Context, resource string, err error) error {
				return fencemw.NewHTTPErrorMessage(http.StatusConflict, "payout "+c.Param("id")+" is being processed", err)
			},
		}))

	lock, _ := locker.TryAcquire(context.Background(), "payout:42", fencing.WithTTL(2*time.Second))
	defer lock.Release(context.Background())
	rec := httptest.NewRecorder()
	e.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/payouts/42", nil))
	show(rec, echo.HeaderRetryAfter)
	// Output:
	// 409 Retry-After: 2 {"message":"payout 42 is being processed"}
}

// A handler whose write a fenced store refused has lost its lock while it ran: it returns
// the store's error, wrapped or not, and the middleware answers 503 Service Unavailable with
// Retry-After (DefaultLostHandler), which a client retries and the idempotency middleware
// does not keep. A LostHandler of your own may answer otherwise.
func ExampleDefaultLostHandler() {
	_, client, stop := exampleRedis()
	defer stop()

	locker := fencing.New(client)
	defer locker.Close()
	var orders store.Memory // refuses a token below the highest it has seen per order

	e := echo.New()
	e.PUT("/orders/:id", func(c *echo.Context) error {
		token, _ := fencemw.TokenFromEcho(c)
		if err := orders.Write("order:"+c.Param("id"), token, func() error { return nil }); err != nil {
			return fmt.Errorf("saving order %s: %w", c.Param("id"), err) // matches store.ErrStaleToken
		}
		return c.String(http.StatusOK, fmt.Sprintf("saved with token %d", token))
	}, fencemw.FenceWithConfig(fencemw.Config{Locker: locker, Namespace: "order"}))

	put := func() {
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, httptest.NewRequest(http.MethodPut, "/orders/42", nil))
		show(rec, echo.HeaderRetryAfter)
	}
	put()
	// The next request stalls past its lease, and a successor writes with token 9 meanwhile.
	_ = orders.Admit("order:42", 9)
	put()
	// Output:
	// 200 saved with token 1
	// 503 Retry-After: 1 {"message":"the lock on order:42 was lost while the request ran"}
}
