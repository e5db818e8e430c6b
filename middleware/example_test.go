package middleware_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	"github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/fencing"
	fencemw "github.com/fencekit/fencekit/middleware"
	"github.com/fencekit/fencekit/store"
)

func Example() {
	// A stand-in for your Redis.
	mr, _ := miniredis.Run()
	defer mr.Close()
	client := redis.NewClient(&redis.Options{Addr: mr.Addr(), DisableIdentity: true})
	defer client.Close()

	locker := fencing.New(client)
	defer locker.Close()

	e := echo.New()
	e.Use(middleware.Recover())
	e.PUT("/orders/:id", func(c echo.Context) error {
		// Pass the token with every write; the store refuses tokens lower than it has seen.
		token, _ := fencemw.TokenFromEcho(c)
		return c.String(http.StatusOK, fmt.Sprintf("order %s saved with token %d\n", c.Param("id"), token))
	}, fencemw.Fence(locker)) // locks "/orders/:id 42" for /orders/42, one request at a time

	for range 2 {
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, httptest.NewRequest(http.MethodPut, "/orders/42", nil))
		fmt.Print(rec.Code, " ", rec.Body.String())
	}
	// Output:
	// 200 order 42 saved with token 1
	// 200 order 42 saved with token 2
}

func ExampleConfig_ToMiddleware() {
	// A stand-in for your Redis.
	mr, _ := miniredis.Run()
	defer mr.Close()
	client := redis.NewClient(&redis.Options{Addr: mr.Addr(), DisableIdentity: true})
	defer client.Close()

	locker := fencing.New(client)
	defer locker.Close()

	fence, err := fencemw.Config{
		Locker:      locker,
		Skipper:     fencemw.SkipSafeMethods, // GET and HEAD run unlocked
		KeyLookup:   "header:X-Account",
		Namespace:   "account", // the lock is "account:<X-Account>", also for a worker
		TTL:         10 * time.Second,
		MaxWait:     100 * time.Millisecond,
		TokenHeader: "Fencing-Token",
	}.ToMiddleware()
	if err != nil {
		fmt.Println(err)
		return
	}

	e := echo.New()
	e.Use(middleware.Recover())
	g := e.Group("/transfers", fence)
	g.POST("", func(c echo.Context) error { return c.NoContent(http.StatusCreated) })

	send := func() {
		req := httptest.NewRequest(http.MethodPost, "/transfers", nil)
		req.Header.Set("X-Account", "acme")
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, req)
		line := fmt.Sprint(rec.Code)
		for _, h := range []string{"Fencing-Token", echo.HeaderRetryAfter} {
			if v := rec.Header().Get(h); v != "" {
				line += " " + h + ": " + v
			}
		}
		fmt.Println(strings.TrimSpace(line + " " + rec.Body.String()))
	}
	send()

	// Another process holds the account's lock for 5 seconds.
	lock, _ := locker.TryAcquire(context.Background(), "account:acme", fencing.WithTTL(5*time.Second))
	send()
	_ = lock.Release(context.Background())
	send()
	// Output:
	// 201 Fencing-Token: 1
	// 423 Retry-After: 5 {"message":"account:acme is busy"}
	// 201 Fencing-Token: 3
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
	// A stand-in for your Redis.
	mr, _ := miniredis.Run()
	defer mr.Close()
	client := redis.NewClient(&redis.Options{Addr: mr.Addr(), DisableIdentity: true})
	defer client.Close()

	// Accounts are few and known; idempotency keys are chosen by clients, and each names a
	// lock with a fence counter: their Locker lets idle counters expire.
	locker := fencing.New(client)
	defer locker.Close()
	keys := fencing.New(client, fencing.WithCounterExpiry(time.Hour))
	defer keys.Close()

	e := echo.New()
	e.POST("/accounts/:id/payouts", func(c echo.Context) error {
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
		fmt.Println(rec.Code, rec.Header().Get("Idempotent-Replayed"), strings.TrimSpace(rec.Body.String()))
	}
	pay("8e03978e", `{"amount":100}`)
	pay("8e03978e", `{"amount":100}`) // a retry after a timeout
	pay("8e03978e", `{"amount":500}`) // the same key for another payout
	// Output:
	// 201  {"account":"acme","amount":100,"token":1}
	// 201 true {"account":"acme","amount":100,"token":1}
	// 422  {"type":"about:blank","title":"Unprocessable Entity","status":422,"detail":"This Idempotency-Key was used with another request (method, route, path values or body)."}
}

// A handler whose write a fenced store refused has lost its lock while it ran: it returns
// the store's error, wrapped or not, and the middleware answers 503 Service Unavailable with
// Retry-After (DefaultLostHandler), which a client retries and the idempotency middleware
// does not keep. A LostHandler of your own may answer otherwise.
func ExampleDefaultLostHandler() {
	// A stand-in for your Redis.
	mr, _ := miniredis.Run()
	defer mr.Close()
	client := redis.NewClient(&redis.Options{Addr: mr.Addr(), DisableIdentity: true})
	defer client.Close()

	locker := fencing.New(client)
	defer locker.Close()
	var orders store.Memory // refuses a token below the highest it has seen per order

	e := echo.New()
	e.PUT("/orders/:id", func(c echo.Context) error {
		token, _ := fencemw.TokenFromEcho(c)
		if err := orders.Write("order:"+c.Param("id"), token, func() error { return nil }); err != nil {
			return fmt.Errorf("saving order %s: %w", c.Param("id"), err) // matches store.ErrStaleToken
		}
		return c.String(http.StatusOK, fmt.Sprintf("saved with token %d", token))
	}, fencemw.FenceWithConfig(fencemw.Config{Locker: locker, Namespace: "order"}))

	put := func() {
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, httptest.NewRequest(http.MethodPut, "/orders/42", nil))
		fmt.Println(rec.Code, rec.Header().Get(echo.HeaderRetryAfter), strings.TrimSpace(rec.Body.String()))
	}
	put()
	// The next request stalls past its lease, and a successor writes with token 9 meanwhile.
	_ = orders.Admit("order:42", 9)
	put()
	// Output:
	// 200  saved with token 1
	// 503 1 {"message":"the lock on order:42 was lost while the request ran"}
}
