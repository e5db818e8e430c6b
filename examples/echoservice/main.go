// Command echoservice is a small Echo service whose writes run under fencekit's Echo
// middleware and land in an in-memory ledger whose writes go through store.Memory, which
// checks fencing tokens. It uses only public packages: copy it into a module of your own.
//
// It keeps account balances. Both write routes lock "account:<id>" (the middleware's
// Namespace "account" and the path parameter id), so a deposit and a withdrawal on one
// account never overlap, and each write carries the lock's fencing token, which the store
// checks against the highest token it has seen for the account:
//
//	GET  /accounts/:id                      the balance; not locked
//	POST /accounts/:id/deposit?amount=N     waits up to 10s for the lock
//	POST /accounts/:id/withdraw?amount=N    tries the lock once: 423 Locked with
//	                                        Retry-After when busy; 409 on insufficient funds
//
// Account ids come from the client, so the service uses the configuration docs/echo.md
// recommends for such names: an id that is not 1 to 32 lower-case letters, digits or '-' is
// answered 400 before any lock is taken, and the Locker lets an account's fence counter
// expire after an hour without a write (fencing.WithCounterExpiry; tokens then start at the
// server clock in microseconds rather than at 1).
//
// A bad amount (not a positive int64) is answered 400 before the lock is taken; a deposit
// that would take the balance past the largest int64 is answered 422. At start the service
// checks the Redis server's settings (servercheck.Check) and refuses an allkeys-* eviction
// policy. FENCEKIT_TRACE=stdout prints the spans.
//
// Usage:
//
//	go run ./examples/echoservice                       # serve on 127.0.0.1:8080
//	go run ./examples/echoservice -addr :9000           # serve elsewhere
//	go run ./examples/echoservice -selftest             # serve on 127.0.0.1:0, send concurrent
//	                                                    # requests, print a report, exit 0 if consistent
//	REDIS_ADDR=127.0.0.1:6379 go run ./examples/echoservice   # a real Redis (or redis://host:port/db)
//
// Without REDIS_ADDR the locks live in an embedded miniredis. Try it:
//
//	curl -i -X POST 'localhost:8080/accounts/a/deposit?amount=10'
//	curl -i localhost:8080/accounts/a
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/servercheck"
)

const (
	// keyPrefix keeps the example's keys apart from other users of the Redis.
	keyPrefix = "echoservice:"
	// counterExpiry is how long an account's fence counter outlives its last write.
	counterExpiry = time.Hour
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "echoservice:", err)
		os.Exit(1)
	}
}

// run parses the flags, connects to Redis (REDIS_ADDR, or an embedded miniredis) and
// either serves until ctx ends or runs the self-test.
func run(ctx context.Context, args []string, getenv func(string) string, out io.Writer) error {
	fs := flag.NewFlagSet("echoservice", flag.ContinueOnError)
	fs.SetOutput(out)
	addr := fs.String("addr", "127.0.0.1:8080", "address to serve on")
	self := fs.Bool("selftest", false, "serve on 127.0.0.1:0, send concurrent requests, report and exit")
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

	tr, err := newTracing(getenv("FENCEKIT_TRACE"), out)
	if err != nil {
		return err
	}
	defer tr.Shutdown(context.WithoutCancel(ctx))
	if *self {
		return selftest(ctx, client, keyPrefix, backend, tr, out)
	}
	locker := newLocker(client, keyPrefix, tr)
	defer locker.Close()
	if err := checkServer(ctx, locker, out); err != nil {
		return err
	}
	e, err := newService(locker, newLedger(), tr.Provider)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "echoservice: serving on http://%s (%s)\n", ln.Addr(), backend)
	// The ledger lives in memory and goes with the process, so the fence counters that
	// guard it can go too: the service removes its keys when it stops. A service whose
	// store outlives it keeps its counters.
	defer deleteKeys(context.WithoutCancel(ctx), client, keyPrefix, out)
	return serve(ctx, ln, e)
}

// newLocker returns the service's Locker: keys under prefix, traced by tr, and fence
// counters that expire after counterExpiry without a write, since the accounts are named by
// the client (this implies the server-time floor, so a counter created again starts above
// every token issued before it).
func newLocker(client redis.UniversalClient, prefix string, tr *tracingSetup) *fencing.Locker {
	return fencing.New(client, fencing.WithPrefix(prefix), fencing.WithCounterExpiry(counterExpiry), tr.Lock)
}

// checkServer first refuses a Locker whose options can never work (Locker.Err: fencing.New
// never fails, so a counter expiry below the TTL would otherwise surface at the first
// request), then checks the Redis server's settings once at start: it refuses an allkeys-*
// eviction policy, which can evict the fencing counters, and prints the other risks. A
// server whose settings cannot be read (miniredis, or an ACL without CONFIG and INFO) is
// reported and used.
func checkServer(ctx context.Context, locker *fencing.Locker, out io.Writer) error {
	if err := locker.Err(); err != nil {
		return err
	}
	report, err := servercheck.Check(ctx, locker)
	switch {
	case errors.Is(err, servercheck.ErrUnsafe):
		return err
	case err != nil:
		fmt.Fprintf(out, "echoservice: server settings not checked: %v\n", err)
	}
	for _, w := range report.Warnings {
		fmt.Fprintf(out, "echoservice: warning: %s\n", w)
	}
	return nil
}

// serve serves h on ln until ctx ends, then shuts down gracefully.
func serve(ctx context.Context, ln net.Listener, h http.Handler) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := srv.Shutdown(sctx)
	if serr := <-errc; !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	return err
}
