package fencing_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/store"
)

// ExampleWithLimit runs two invoice jobs of one customer at once (limit 2) and fences what
// each writes: its own invoice. A check keyed by the customer, the lock's resource, would
// refuse the older of the two live holders; a check keyed by the invoice refuses only a
// stale holder of that invoice.
func ExampleWithLimit() {
	// A stand-in for your Redis.
	mr, _ := miniredis.Run()
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()

	locker := fencing.New(rdb, fencing.WithLimit(2))
	defer locker.Close()
	ctx := context.Background()

	first, _ := locker.TryAcquire(ctx, "customer-9")  // the job for invoice 1
	second, _ := locker.TryAcquire(ctx, "customer-9") // the job for invoice 2, at the same time
	_, err := locker.TryAcquire(ctx, "customer-9")
	fmt.Println("third job:", errors.Is(err, fencing.ErrNotAcquired))

	var byCustomer, byInvoice store.Memory
	noop := func() error { return nil }
	// Wrong: one mark for the resource. The newer holder's write raises it, and the older,
	// still a rightful holder, is refused.
	fmt.Println(byCustomer.Write("customer-9", second.Token(), noop))
	fmt.Println(byCustomer.Write("customer-9", first.Token(), noop))
	// Right: one mark per entity written.
	fmt.Println(byInvoice.Write("invoice-2", second.Token(), noop))
	fmt.Println(byInvoice.Write("invoice-1", first.Token(), noop))
	// The job for invoice 1 is retried while its first run, paused, still believes it holds a
	// slot: the retry's newer token wins and the paused run's late write is refused.
	_ = first.Release(ctx)
	retry, _ := locker.TryAcquire(ctx, "customer-9")
	fmt.Println(byInvoice.Write("invoice-1", retry.Token(), noop))
	err = byInvoice.Write("invoice-1", first.Token(), noop)
	fmt.Println("late write:", errors.Is(err, store.ErrStaleToken))
	_ = second.Release(ctx)
	_ = retry.Release(ctx)
	// Output:
	// third job: true
	// <nil>
	// store: stale fencing token 1 for "customer-9" (high-water mark 2)
	// <nil>
	// <nil>
	// <nil>
	// late write: true
}
