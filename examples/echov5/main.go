// Command echov5 is a small Echo v5 service whose order updates run under fencekit's Echo v5
// middleware and land in an in-memory order book whose writes go through store.Memory, which
// checks fencing tokens. It uses only public packages: copy it into a module of your own.
//
// Its routes take an order id from the client, so it uses the configuration docs/echo.md
// recommends for names a client chooses: ids are checked before any lock is taken (1 to 20
// digits, else 400), and the Locker lets a fence counter expire once its order has seen no
// update for an hour (fencing.WithCounterExpiry), so ids sent once do not stay in Redis:
//
//	GET /orders/:id                      the order; not locked
//	PUT /orders/:id  {"status": "paid"}  moves the order to a new status: waits up to 2s
//	                                     for "order:<id>", checks the move against the
//	                                     current status (409 if not allowed) and writes with
//	                                     the lock's token
//	POST /orders/:id/payments            records a payment, once per Idempotency-Key
//	     {"amount": 100}                 (required): a retry gets the stored response, the
//	                                     key with another body 422; the payment is written
//	                                     under the order's lock, with its token
//
// It starts the Echo v5 way, with echo.StartConfig and a context that SIGINT and SIGTERM
// cancel: the server then stops taking requests, lets those in flight finish (up to 10s),
// and the service deletes the keys it created before it exits. At start it checks the Redis
// server's settings (servercheck.Check) and refuses an allkeys-* eviction policy.
//
// Usage:
//
//	go run ./examples/echov5                                 # serve on 127.0.0.1:8080, embedded miniredis
//	go run ./examples/echov5 -addr :9000                     # serve elsewhere
//	REDIS_ADDR=127.0.0.1:6379 go run ./examples/echov5       # a real Redis (or redis://host:port/db)
//
// Try it:
//
//	curl -i -X PUT localhost:8080/orders/42 -d '{"status":"paid"}' -H 'Content-Type: application/json'
//	curl -i localhost:8080/orders/42
//	curl -i localhost:8080/orders/42/payments -d '{"amount":100}' -H 'Content-Type: application/json' -H 'Idempotency-Key: 8e03978e'
//	(the same again: the same payment, Idempotent-Replayed: true)
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/labstack/echo/v5"
	"github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/servercheck"
)

const (
	// keyPrefix keeps the service's keys apart from other users of the Redis.
	keyPrefix = "echov5:"
	// counterExpiry is how long an order's fence counter outlives its last update.
	counterExpiry = time.Hour
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "echov5:", err)
		os.Exit(1)
	}
}

// run parses the flags, connects to Redis (REDIS_ADDR, or an embedded miniredis) and serves
// until ctx ends.
func run(ctx context.Context, args []string, getenv func(string) string, out io.Writer) error {
	fs := flag.NewFlagSet("echov5", flag.ContinueOnError)
	fs.SetOutput(out)
	addr := fs.String("addr", "127.0.0.1:8080", "address to serve on")
	if err := fs.Parse(args); err != nil {
		return err
	}

	backend := "REDIS_ADDR=" + getenv("REDIS_ADDR")
	opt := &redis.Options{Addr: getenv("REDIS_ADDR")}
	switch {
	case opt.Addr == "":
		mr, err := miniredis.Run()
		if err != nil {
			return err
		}
		defer mr.Close()
		opt.Addr, backend = mr.Addr(), "embedded miniredis"
	case strings.Contains(opt.Addr, "://"):
		var err error
		if opt, err = redis.ParseURL(opt.Addr); err != nil { // redis://host:port/db
			return err
		}
	}
	// ContextTimeoutEnabled bounds every command by its context, so a hung Redis cannot
	// hold a request longer than its deadline.
	opt.DisableIdentity, opt.ContextTimeoutEnabled = true, true
	client := redis.NewClient(opt)
	defer client.Close()
	if err := client.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("redis at %s: %w", opt.Addr, err)
	}

	// The recommended configuration for resources named after client input: idle fence
	// counters expire (this implies the server-time floor, so a counter created again
	// starts above every token issued before).
	locker := fencing.New(client, fencing.WithPrefix(keyPrefix), fencing.WithCounterExpiry(counterExpiry))
	defer locker.Close()
	if err := checkServer(ctx, locker, out); err != nil {
		return err
	}
	logger := slog.New(slog.NewTextHandler(out, nil))
	e, err := newService(locker, newOrderBook(), logger)
	if err != nil {
		return err
	}
	// The order book lives in memory and goes with the process, so the fence counters
	// that guard it can go too: the service removes its keys when it stops. A service
	// whose store outlives it keeps them (they expire on their own after counterExpiry).
	defer deleteKeys(context.WithoutCancel(ctx), client, keyPrefix, out)

	sc := echo.StartConfig{
		Address:         *addr,
		HideBanner:      true,
		HidePort:        true,
		GracefulTimeout: 10 * time.Second,
		ListenerAddrFunc: func(a net.Addr) {
			fmt.Fprintf(out, "echov5: serving on http://%s (%s)\n", a, backend)
		},
		BeforeServeFunc: func(s *http.Server) error {
			s.ReadHeaderTimeout, s.WriteTimeout = 5*time.Second, 30*time.Second
			return nil
		},
		OnShutdownError: func(err error) { logger.Error("graceful shutdown", "error", err) },
	}
	// Start returns once ctx is cancelled and the requests in flight have finished, or
	// GracefulTimeout has passed.
	err = sc.Start(ctx, e)
	fmt.Fprintln(out, "echov5: stopped")
	return err
}

// checkServer first refuses a Locker whose options can never work (Locker.Err: fencing.New
// never fails, so a counter expiry below the TTL would otherwise surface at the first
// request), then checks the Redis server's settings once at start: it refuses an allkeys-*
// eviction policy, which can evict the fence counters, and prints the other risks. A server
// whose settings cannot be read (miniredis, or an ACL without CONFIG and INFO) is reported
// and used.
func checkServer(ctx context.Context, locker *fencing.Locker, out io.Writer) error {
	if err := locker.Err(); err != nil {
		return err
	}
	report, err := servercheck.Check(ctx, locker)
	switch {
	case errors.Is(err, servercheck.ErrUnsafe):
		return err
	case err != nil:
		fmt.Fprintf(out, "echov5: server settings not checked: %v\n", err)
	}
	for _, w := range report.Warnings {
		fmt.Fprintf(out, "echov5: warning: %s\n", w)
	}
	return nil
}

// deleteKeys deletes every key under prefix.
func deleteKeys(ctx context.Context, client *redis.Client, prefix string, out io.Writer) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	iter := client.Scan(ctx, 0, prefix+"*", 500).Iterator()
	for iter.Next(ctx) {
		client.Del(ctx, iter.Val())
	}
	if err := iter.Err(); err != nil {
		fmt.Fprintf(out, "echov5: deleting the service's keys: %v\n", err)
	}
}
