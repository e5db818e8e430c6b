package leader_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/leader"
	"github.com/fencekit/fencekit/store"
)

func ExampleElector() {
	// A stand-in for your Redis.
	mr, _ := miniredis.Run()
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()

	locker := fencing.New(rdb, fencing.WithTTL(10*time.Second))
	defer locker.Close()
	// Every replica makes the same Elector and runs it; one at a time leads.
	elector := leader.New(locker, "nightly-settlement")
	ctx, stop := context.WithCancel(context.Background())
	fmt.Println("before Run:", errors.Is(elector.IsLeader(ctx), leader.ErrNotLeader))
	done := make(chan error, 1)
	go func() { done <- elector.Run(ctx) }()

	// The job, as a scheduler runs it: gocron v2 with gocron.WithDistributedElector(elector)
	// calls IsLeader before each run and skips the run on an error.
	var ledger store.Memory
	job := func() {
		if err := elector.IsLeader(ctx); err != nil {
			return
		}
		epoch, ok := elector.Token()
		if !ok {
			return // leadership ended since IsLeader
		}
		err := ledger.Write("settlement", epoch, func() error {
			fmt.Println("settling with epoch", epoch)
			return nil
		})
		if err != nil {
			fmt.Println(err) // a stale epoch: a newer leader has written
		}
	}
	for elector.IsLeader(ctx) != nil { // the only candidate: it leads within a round trip
		time.Sleep(time.Millisecond)
	}
	job()

	stop() // Run resigns and returns
	fmt.Println("Run:", <-done)
	fmt.Println("after Run:", errors.Is(elector.IsLeader(context.Background()), leader.ErrNotLeader))
	// Output:
	// before Run: true
	// settling with epoch 1
	// Run: context canceled
	// after Run: true
}
