// Command quickstart takes a fenced lock, writes under it with the lock's fencing token
// through a store that checks the token, and removes the keys it created. It needs a Redis:
// the one at REDIS_ADDR, or at 127.0.0.1:6379.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"os"

	"github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/servercheck"
	"github.com/fencekit/fencekit/store"
)

func main() {
	addr := os.Getenv("REDIS_ADDR")
	if addr == "" {
		addr = "127.0.0.1:6379"
	}
	// ContextTimeoutEnabled bounds every command by its context.
	rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	defer rdb.Close()
	if err := run(context.Background(), rdb, os.Stdout); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, rdb *redis.Client, out io.Writer) error {
	locker := fencing.New(rdb, fencing.WithPrefix("quickstart:"))
	defer locker.Close()
	// New never fails; Err reports options that can never work (a counter expiry below the
	// TTL, say) here, instead of at the first call.
	if err := locker.Err(); err != nil {
		return err
	}
	// Refuse a server whose eviction policy can drop the token counters (allkeys-*).
	if _, err := servercheck.Check(ctx, locker); errors.Is(err, servercheck.ErrUnsafe) {
		return err
	}
	orders := store.NewRedis(rdb) // refuses a write whose token is below one it has seen

	// Do waits for the lock, renews its lease while the function runs, cancels ctx if the
	// lock is lost, and releases it when the function returns.
	err := locker.Do(ctx, "order-42", func(ctx context.Context) error {
		token, _ := fencing.TokenFromContext(ctx)
		fmt.Fprintln(out, "holding order-42 with fencing token", token)
		return orders.Write(ctx, "quickstart:order-42", token, "paid")
	})
	if err != nil {
		return err
	}
	status, mark, err := orders.Read(ctx, "quickstart:order-42")
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "order-42 is %q, last written with token %d\n", status, mark)

	// A throwaway program removes what it created. A real service keeps its counters:
	// deleting one while the resource is in use lets tokens start again at 1.
	return rdb.Del(ctx, "quickstart:order-42", "quickstart:{order-42}:fence").Err()
}
