// Command quickstart takes a fenced lock, prints its token and releases it.
//
//	go run ./examples/quickstart            # on an embedded miniredis
//	REDIS_ADDR=127.0.0.1:6379 go run ./examples/quickstart
package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/fencing"
)

func main() {
	if err := run(context.Background(), os.Getenv("REDIS_ADDR"), os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, addr string, out io.Writer) error {
	if addr == "" {
		mr, err := miniredis.Run()
		if err != nil {
			return err
		}
		defer mr.Close()
		addr = mr.Addr()
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()

	locker := fencing.New(rdb, fencing.WithPrefix("quickstart:"))
	defer locker.Close()

	lock, err := locker.Acquire(ctx, "order-42")
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "acquired %q with fencing token %d\n", lock.Resource(), lock.Token())
	if err := lock.Release(ctx); err != nil {
		return err
	}
	fmt.Fprintln(out, "released")
	return nil
}
