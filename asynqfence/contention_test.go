package asynqfence_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/fencekit/fencekit/asynqfence"
)

// BenchmarkBusyRetries runs 30 tasks that all lock one resource, with a 1s lease and 20ms
// of work each, on a real asynq.Server (10 workers, Asynq's default polling intervals), and
// reports how long the 30 took and how many attempts found the resource busy:
//
//	FENCING_REDIS_ADDR=127.0.0.1:6379 go test -run '^$' -bench BusyRetries -benchtime 1x -count 3 ./asynqfence/
//
// Each iteration uses a queue of its own and removes its keys.
func BenchmarkBusyRetries(b *testing.B) {
	skipUnlessRealRedis(b)
	const tasks, work = 30, 20 * time.Millisecond
	for b.Loop() {
		h := newHarness(b)
		var done, busy atomic.Int64
		finished := make(chan struct{})
		work := asynq.HandlerFunc(func(ctx context.Context, _ *asynq.Task) error {
			time.Sleep(work)
			if done.Add(1) == tasks {
				close(finished)
			}
			return nil
		})
		fenced := asynqfence.Wrap(work, h.locker, byPayload, asynqfence.WithTTL(time.Second))
		counting := asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
			err := fenced.ProcessTask(ctx, t)
			if asynqfence.IsBusy(err) {
				busy.Add(1)
			}
			return err
		})
		cfg := asynqfence.ServerConfig(asynq.Config{
			Concurrency:     10,
			Queues:          map[string]int{h.queue: 1},
			ShutdownTimeout: 3 * time.Second,
			Logger:          quietLogger{},
		})
		srv := asynq.NewServerFromRedisClient(h.r.Client, cfg)
		for i := 0; i < tasks; i++ {
			h.enqueue(b, "job", "the-resource", asynq.MaxRetry(3))
		}
		start := time.Now()
		if err := srv.Start(counting); err != nil {
			b.Fatal(err)
		}
		select {
		case <-finished:
		case <-time.After(5 * time.Minute):
			b.Fatalf("%d of %d tasks done after 5 minutes", done.Load(), tasks)
		}
		elapsed := time.Since(start)
		srv.Shutdown()
		b.ReportMetric(elapsed.Seconds(), "s/30tasks")
		b.ReportMetric(float64(busy.Load()), "busy/30tasks")
	}
}
