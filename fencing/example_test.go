package fencing_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/fencing"
)

func Example() {
	// A stand-in for your Redis.
	mr, _ := miniredis.Run()
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()

	locker := fencing.New(rdb)
	defer locker.Close()
	ctx := context.Background()

	err := locker.Do(ctx, "order-42", func(ctx context.Context) error {
		token, _ := fencing.TokenFromContext(ctx)
		// Write with the token; the store rejects tokens lower than the last it saw:
		//   UPDATE orders SET ..., fence_token = $token WHERE id = 42 AND fence_token <= $token
		fmt.Println("writing order-42 with token", token)
		return nil
	})
	if err != nil {
		fmt.Println(err)
	}
	// Output: writing order-42 with token 1
}

func ExampleLocker_TryAcquire() {
	// A stand-in for your Redis.
	mr, _ := miniredis.Run()
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()

	locker := fencing.New(rdb, fencing.WithTTL(10*time.Second))
	defer locker.Close()
	ctx := context.Background()

	first, err := locker.TryAcquire(ctx, "invoice-7")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("first token:", first.Token())

	_, err = locker.TryAcquire(ctx, "invoice-7")
	if errors.Is(err, fencing.ErrNotAcquired) {
		wait, _ := fencing.RetryAfter(err)
		fmt.Println("busy; retry after", wait)
	}

	_ = first.Release(ctx)
	second, _ := locker.TryAcquire(ctx, "invoice-7")
	defer second.Release(ctx)
	fmt.Println("second token:", second.Token())
	// Output:
	// first token: 1
	// busy; retry after 10s
	// second token: 2
}

func ExampleLocker_Acquire() {
	// A stand-in for your Redis.
	mr, _ := miniredis.Run()
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()

	locker := fencing.New(rdb)
	defer locker.Close()

	held, _ := locker.TryAcquire(context.Background(), "report")
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := locker.Acquire(ctx, "report")
	fmt.Println(errors.Is(err, fencing.ErrNotAcquired), errors.Is(err, context.DeadlineExceeded))
	_ = held.Release(context.Background())
	// Output: true true
}

func ExampleLock_Extend() {
	// A stand-in for your Redis.
	mr, _ := miniredis.Run()
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()

	locker := fencing.New(rdb, fencing.WithTTL(time.Second))
	defer locker.Close()
	ctx := context.Background()

	lock, _ := locker.TryAcquire(ctx, "batch")
	_ = lock.Extend(ctx, time.Minute)
	ttl, _ := lock.TTL(ctx)
	fmt.Println(ttl)

	mr.FastForward(2 * time.Minute) // the lease runs out
	fmt.Println(errors.Is(lock.Extend(ctx, time.Minute), fencing.ErrNotHeld))
	// Output:
	// 1m0s
	// true
}

func ExampleLocker_DoAll() {
	// A stand-in for your Redis.
	mr, _ := miniredis.Run()
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()

	locker := fencing.New(rdb)
	defer locker.Close()
	ctx := context.Background()

	// A transfer locks both accounts, in whichever order the caller names them: the set is
	// taken in one canonical order, so a transfer the other way cannot deadlock with it.
	err := locker.DoAll(ctx, []string{"account:bob", "account:alice"}, func(ctx context.Context) error {
		from, _ := fencing.TokenFor(ctx, "account:alice")
		to, _ := fencing.TokenFor(ctx, "account:bob")
		// One transaction, each row checked against its own token:
		//   UPDATE accounts SET balance = balance - 10, fence_token = $from WHERE id = 'alice' AND fence_token <= $from
		//   UPDATE accounts SET balance = balance + 10, fence_token = $to   WHERE id = 'bob'   AND fence_token <= $to
		fmt.Println("alice's token", from, "bob's token", to)
		return nil
	})
	if err != nil {
		fmt.Println(err)
	}

	// Busy: TryAcquireAll takes nothing and names the resource that was busy.
	held, _ := locker.TryAcquire(ctx, "account:bob")
	defer held.Release(ctx)
	_, err = locker.TryAcquireAll(ctx, []string{"account:alice", "account:bob"})
	var busy *fencing.BusyError
	fmt.Println(errors.As(err, &busy), busy.Resource)
	// Output:
	// alice's token 1 bob's token 1
	// true account:bob
}

func ExampleLocker_Lead() {
	// A stand-in for your Redis.
	mr, _ := miniredis.Run()
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()

	locker := fencing.New(rdb, fencing.WithTTL(10*time.Second))
	defer locker.Close()
	ctx, stop := context.WithCancel(context.Background())
	defer stop()

	// Every replica runs the same loop; one at a time leads. Lead returns when ctx ends.
	err := locker.Lead(ctx, "report-builder", func(ctx context.Context) error {
		epoch, _ := fencing.TokenFromContext(ctx)
		fmt.Println("leading with epoch", epoch)
		// Lead until the context ends: here, at once. When leadership is lost, ctx ends
		// with a cause matching fencing.ErrNotHeld and Lead campaigns again.
		stop()
		<-ctx.Done()
		return context.Cause(ctx)
	})
	fmt.Println(err)
	// Output:
	// leading with epoch 1
	// context canceled
}
