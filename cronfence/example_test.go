package cronfence_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/robfig/cron/v3"

	"github.com/fencekit/fencekit/cronfence"
	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/leader"
	"github.com/fencekit/fencekit/store"
)

func ExampleFunc() {
	mr, _ := miniredis.Run() // a stand-in for your Redis
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	locker := fencing.New(rdb, fencing.WithTTL(10*time.Second))
	defer locker.Close()

	// Every replica runs an Elector of the same name and the same Cron; one at a time leads.
	elector := leader.New(locker, "nightly-settlement")
	var ledger store.Memory // refuses an epoch below the highest it has seen
	settled := make(chan int64)
	c := cron.New()
	_, err := c.AddJob("@every 1s", cronfence.Func(elector, func(ctx context.Context) {
		epoch, _ := fencing.TokenFromContext(ctx)
		err := ledger.Write("settlement", epoch, func() error {
			return nil // the job's writes, with epoch
		})
		if err != nil {
			return // a stale epoch: a newer leader has written
		}
		select {
		case settled <- epoch:
		default:
		}
	}))
	if err != nil {
		fmt.Println(err)
		return
	}

	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- elector.Run(ctx) }()
	for elector.IsLeader(ctx) != nil { // the only replica: it leads within a round trip
		time.Sleep(time.Millisecond)
	}
	c.Start()
	fmt.Println("settled with epoch", <-settled)
	<-c.Stop().Done() // waits for a run in progress

	stop() // Run resigns and returns
	fmt.Println("Run:", <-done)
	// Output:
	// settled with epoch 1
	// Run: context canceled
}

func ExampleSkipIfNotLeader() {
	mr, _ := miniredis.Run() // a stand-in for your Redis
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	locker := fencing.New(rdb, fencing.WithTTL(10*time.Second))
	defer locker.Close()
	elector := leader.New(locker, "nightly-settlement")

	// For every job of a Cron: cron.New(cron.WithChain(cronfence.SkipIfNotLeader(elector))).
	// For one job, as here:
	job := cron.NewChain(cronfence.SkipIfNotLeader(elector, cronfence.WithSkipHandler(func(err error) {
		fmt.Println("skipped, not leader:", errors.Is(err, leader.ErrNotLeader))
	}))).Then(cron.FuncJob(func() {
		epoch, ok := elector.Token()
		if !ok {
			return // leadership ended since the wrapper asked
		}
		fmt.Println("settling with epoch", epoch)
	}))

	job.Run() // the elector does not run yet: it does not lead
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- elector.Run(ctx) }()
	for elector.IsLeader(ctx) != nil {
		time.Sleep(time.Millisecond)
	}
	job.Run()
	stop()
	<-done
	job.Run() // Run resigned
	// Output:
	// skipped, not leader: true
	// settling with epoch 1
	// skipped, not leader: true
}

func ExampleSchedule() {
	mr, _ := miniredis.Run() // a stand-in for your Redis
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	locker := fencing.New(rdb, fencing.WithTTL(10*time.Second))
	defer locker.Close()
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	done := make(chan error, 1)
	c := cron.New(cron.WithSeconds(), cron.WithLocation(time.UTC))

	type run struct {
		epoch int64
		tick  time.Time
	}
	runs := make(chan run, 1)
	// The wiring, in every replica: an Elector, its campaign, the job.
	elector := leader.New(locker, "nightly-settlement")
	go func() { done <- elector.Run(ctx) }()
	_, err := cronfence.Schedule(c, "* * * * * *", elector, func(ctx context.Context) {
		epoch, _ := fencing.TokenFromContext(ctx)
		tick, _ := cronfence.TickFromContext(ctx) // the second it was scheduled for
		select {
		case runs <- run{epoch, tick}:
		default:
		}
	})
	if err != nil {
		fmt.Println(err)
		return
	}

	for elector.IsLeader(ctx) != nil { // the only replica: it leads within a round trip
		time.Sleep(time.Millisecond)
	}
	c.Start()
	r := <-runs
	fmt.Println("epoch", r.epoch, "tick on the second:", r.tick.Equal(r.tick.Truncate(time.Second)))
	<-c.Stop().Done()
	stop()
	fmt.Println("Run:", <-done)
	// Output:
	// epoch 1 tick on the second: true
	// Run: context canceled
}
