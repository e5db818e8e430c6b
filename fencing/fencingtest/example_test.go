package fencingtest_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/fencing/fencingtest"
	"github.com/fencekit/fencekit/store"
)

// A holder paused past its lease writes late: the store, which saw the next holder's write,
// refuses it.
func ExampleStall() {
	mr, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	locker := fencing.New(rdb)
	defer locker.Close()
	ctx := context.Background()
	var orders store.Memory // refuses a write whose token is below one it has seen

	err = locker.Do(ctx, "order-42", func(ctx context.Context) error {
		token, _ := fencing.TokenFromContext(ctx)
		// A second worker waits for the order and writes it as soon as it holds the lock.
		written := make(chan struct{})
		go func() {
			_ = locker.Do(context.Background(), "order-42", func(ctx context.Context) error {
				token, _ := fencing.TokenFromContext(ctx)
				defer close(written)
				return orders.Write("order-42", token, func() error { return nil })
			})
		}()
		if err := fencingtest.Stall(ctx); err != nil { // paused past the lease
			return err
		}
		<-written
		err := orders.Write("order-42", token, func() error { return nil })
		fmt.Println("the paused holder's write refused:", errors.Is(err, store.ErrStaleToken))
		fmt.Println("its context cancelled:", ctx.Err() != nil)
		return err
	})
	fmt.Println("Do reports the lock lost:", errors.Is(err, fencing.ErrNotHeld))
	// Output:
	// the paused holder's write refused: true
	// its context cancelled: false
	// Do reports the lock lost: true
}

// Takeover runs the next holder's work between the stall and the paused holder's late
// write, in that order, without channels: the store refuses the late write. (On SQL through
// store.Fences, see the example of Takeover in package store/gormfence.)
func ExampleTakeover() {
	mr, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	locker := fencing.New(rdb)
	defer locker.Close()
	var orders store.Memory // refuses a write whose token is below one it has seen
	ship := func(ctx context.Context) error {
		token, _ := fencing.TokenFromContext(ctx)
		return orders.Write("order-42", token, func() error { return nil })
	}

	err = locker.Do(context.Background(), "order-42", func(ctx context.Context) error {
		// Paused past the lease while the next worker takes the order and ships it.
		if err := fencingtest.Takeover(ctx, ship); err != nil {
			return err
		}
		err := ship(ctx) // the paused worker wakes up
		fmt.Println("the paused holder's write refused:", errors.Is(err, store.ErrStaleToken))
		return err
	})
	fmt.Println("Do reports the lock lost:", errors.Is(err, fencing.ErrNotHeld))
	// Output:
	// the paused holder's write refused: true
	// Do reports the lock lost: true
}
