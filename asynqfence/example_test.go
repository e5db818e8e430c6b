package asynqfence_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/asynqfence"
	"github.com/fencekit/fencekit/fencing"
)

func ExampleWrap() {
	mr, _ := miniredis.Run() // a stand-in for your Redis
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	locker := fencing.New(rdb)
	defer locker.Close()

	send := asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		token, _ := fencing.TokenFromContext(ctx)
		fmt.Printf("sending invoice %s with token %d\n", t.Payload(), token)
		return nil // a real handler passes the token with its writes
	})
	h := asynqfence.Wrap(send, locker, func(t *asynq.Task) (string, error) {
		return "invoice:" + string(t.Payload()), nil
	})

	// Asynq's server calls ProcessTask with a context whose deadline is the task's.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for range 2 {
		if err := h.ProcessTask(ctx, asynq.NewTask("invoice:send", []byte("42"))); err != nil {
			fmt.Println(err)
		}
	}
	// Output:
	// sending invoice 42 with token 1
	// sending invoice 42 with token 2
}

func ExampleMiddleware() {
	mr, _ := miniredis.Run() // a stand-in for your Redis
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	locker := fencing.New(rdb)
	defer locker.Close()

	mux := asynq.NewServeMux()
	mux.HandleFunc("invoice:send", func(ctx context.Context, t *asynq.Task) error {
		token, _ := fencing.TokenFromContext(ctx)
		fmt.Printf("sending invoice %s with token %d\n", t.Payload(), token)
		return nil
	})
	mux.Use(asynqfence.Middleware(locker, func(t *asynq.Task) (string, error) {
		switch t.Type() {
		case "invoice:send":
			return "invoice:" + string(t.Payload()), nil
		}
		return "", nil // other task types, unknown ones included: no lock
	}))

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := mux.ProcessTask(ctx, asynq.NewTask("invoice:send", []byte("42")))
	fmt.Println("error:", err)
	err = mux.ProcessTask(ctx, asynq.NewTask("no-such-type", nil))
	fmt.Println("unknown type:", errors.Is(err, asynq.ErrHandlerNotFound))

	// Another worker holds the invoice: the handler does not run.
	held, _ := locker.TryAcquire(ctx, "invoice:42")
	defer held.Release(ctx)
	err = mux.ProcessTask(ctx, asynq.NewTask("invoice:send", []byte("42")))
	fmt.Println("busy:", asynqfence.IsBusy(err))
	// Output:
	// sending invoice 42 with token 1
	// error: <nil>
	// unknown type: true
	// busy: true
}

func ExampleServerConfig() {
	mr, _ := miniredis.Run() // a stand-in for your Redis
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	locker := fencing.New(rdb)
	defer locker.Close()

	// The server's configuration: busy tasks are no failures, come back after about the
	// holder's remaining lease, and never reach the ErrorHandler. ServerConfig chains the
	// functions already set.
	cfg := asynqfence.ServerConfig(asynq.Config{
		ErrorHandler: asynq.ErrorHandlerFunc(func(ctx context.Context, t *asynq.Task, err error) {
			// report err: busy attempts are filtered out before this
		}),
	})

	ctx := context.Background()
	held, _ := locker.TryAcquire(ctx, "invoice:42", fencing.WithTTL(10*time.Second))
	defer held.Release(ctx)
	task := asynq.NewTask("invoice:send", []byte("42"))
	h := asynqfence.Wrap(asynq.HandlerFunc(func(context.Context, *asynq.Task) error { return nil }), locker,
		func(t *asynq.Task) (string, error) { return "invoice:" + string(t.Payload()), nil })
	err := h.ProcessTask(ctx, task)

	delay := cfg.RetryDelayFunc(0, err, task)
	fmt.Println("failure:", cfg.IsFailure(err))
	// The holder's 10s, plus up to 4s spread over whole seconds.
	fmt.Println("retry in 9s to 14s:", delay >= 9*time.Second && delay < 14*time.Second)
	// Output:
	// failure: false
	// retry in 9s to 14s: true
}

func ExampleScheduler() {
	// A stand-in for your Redis.
	mr, _ := miniredis.Run()
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()

	locker := fencing.New(rdb, fencing.WithTTL(10*time.Second))
	defer locker.Close()
	enqueued := make(chan asynqfence.EnqueueEvent, 1)
	// Every replica runs the same scheduler: the same name, the same entries.
	s := asynqfence.NewScheduler(asynq.NewClientFromRedisClient(rdb), locker, "reports",
		asynqfence.WithSchedulerHooks(asynqfence.SchedulerHooks{
			End: func(_ context.Context, e asynqfence.EnqueueEvent) { enqueued <- e },
		}))
	if _, err := s.Register("@daily", asynq.NewTask("report:daily", nil)); err != nil {
		fmt.Println(err)
		return
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()

	// The replica that leads first enqueues the most recent tick (catch-up: at most one
	// period late), today's midnight; a leader after it would find it there already.
	e := <-enqueued
	midnight := time.Now().UTC().Truncate(24 * time.Hour)
	fmt.Printf("enqueued %s; today's midnight tick: %v; duplicate: %v\n", e.Task.Type(), e.Tick.Equal(midnight), e.Duplicate)
	stop()
	fmt.Println(<-done)
	// Output:
	// enqueued report:daily; today's midnight tick: true; duplicate: false
	// context canceled
}

func ExampleTickOf() {
	// The handler of a task that a Scheduler enqueues "@daily": it settles the day before
	// its tick, however late it runs (a queue that is behind, a retry).
	settle := asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		tick, ok := asynqfence.TickOf(t)
		if !ok {
			return fmt.Errorf("%s: not enqueued by a Scheduler: %w", t.Type(), asynq.SkipRetry)
		}
		fmt.Println("settling", tick.AddDate(0, 0, -1).Format(time.DateOnly))
		return nil
	})
	// The task of the tick of 31 January 2025, 00:00 UTC, as the Scheduler enqueues it.
	tick := asynq.NewTaskWithHeaders("settle", nil, map[string]string{asynqfence.TickHeader: "2025-01-31T00:00:00Z"})
	if err := settle.ProcessTask(context.Background(), tick); err != nil {
		fmt.Println(err)
	}
	// A task enqueued by hand has no tick.
	if err := settle.ProcessTask(context.Background(), asynq.NewTask("settle", nil)); err != nil {
		fmt.Println(err)
	}
	// Output:
	// settling 2025-01-30
	// settle: not enqueued by a Scheduler: skip retry for the task
}
