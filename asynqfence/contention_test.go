package asynqfence_test

import (
	"context"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/fencekit/fencekit/asynqfence"
	"github.com/fencekit/fencekit/fencing"
)

// BenchmarkBusyRetries runs 30 tasks that all lock one resource, with a 1s lease and 20ms
// of work each, on a real asynq.Server (10 workers, Asynq's default polling intervals), and
// reports how long the 30 took and how many attempts found the resource busy:
//
//	FENCING_REDIS_ADDR=127.0.0.1:6379 go test -run '^$' -bench BusyRetries -benchtime 1x -count 3 ./asynqfence/
//
// The cases: "before" is the wiring documented before ServerConfig (IsFailure, and the
// RetryDelay of then: the holder's remaining lease, at least 1s, plus up to a quarter of it,
// with Asynq's 5s DelayedTaskCheckInterval); "ServerConfig" is ServerConfig as it is;
// "ServerConfig+wait" also waits up to 5s for the lock inside the handler
// (fencing.WithMaxWait). Each iteration uses a queue of its own and removes its keys.
func BenchmarkBusyRetries(b *testing.B) {
	skipUnlessRealRedis(b)
	before := func(cfg asynq.Config) asynq.Config {
		cfg.IsFailure = asynqfence.IsFailure(nil)
		cfg.RetryDelayFunc = func(n int, err error, t *asynq.Task) time.Duration {
			if !asynqfence.IsBusy(err) {
				return asynq.DefaultRetryDelayFunc(n, err, t)
			}
			d, _ := fencing.RetryAfter(err)
			d = max(d, time.Second)
			return d + rand.N(d/4+1)
		}
		return cfg
	}
	for _, tc := range []struct {
		name   string
		config func(asynq.Config) asynq.Config
		opts   []asynqfence.Option
	}{
		{"before", before, nil},
		{"ServerConfig", asynqfence.ServerConfig, nil},
		{"ServerConfig+wait", asynqfence.ServerConfig, []asynqfence.Option{asynqfence.WithLockOptions(fencing.WithMaxWait(5 * time.Second))}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			for b.Loop() {
				elapsed, busy := busyRetries(b, tc.config, tc.opts)
				b.ReportMetric(elapsed.Seconds(), "s/30tasks")
				b.ReportMetric(float64(busy), "busy/30tasks")
			}
		})
	}
}

// busyRetries runs the 30 tasks of BenchmarkBusyRetries and returns how long they took and
// how many attempts found the resource busy.
func busyRetries(b *testing.B, config func(asynq.Config) asynq.Config, opts []asynqfence.Option) (time.Duration, int64) {
	const tasks, work = 30, 20 * time.Millisecond
	h := newHarness(b)
	var done, busy atomic.Int64
	finished := make(chan struct{})
	handler := asynq.HandlerFunc(func(ctx context.Context, _ *asynq.Task) error {
		time.Sleep(work)
		if done.Add(1) == tasks {
			close(finished)
		}
		return nil
	})
	opts = append([]asynqfence.Option{asynqfence.WithTTL(time.Second)}, opts...)
	fenced := asynqfence.Wrap(handler, h.locker, byPayload, opts...)
	counting := asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		err := fenced.ProcessTask(ctx, t)
		if asynqfence.IsBusy(err) {
			busy.Add(1)
		}
		return err
	})
	srv := asynq.NewServerFromRedisClient(h.r.Client, config(asynq.Config{
		Concurrency:     10,
		Queues:          map[string]int{h.queue: 1},
		ShutdownTimeout: 3 * time.Second,
		Logger:          quietLogger{},
	}))
	for range tasks {
		h.enqueue(b, "job", "the-resource", asynq.MaxRetry(3))
	}
	start := time.Now()
	if err := srv.Start(counting); err != nil {
		b.Fatal(err)
	}
	defer srv.Shutdown()
	select {
	case <-finished:
	case <-time.After(5 * time.Minute):
		b.Fatalf("%d of %d tasks done after 5 minutes", done.Load(), tasks)
	}
	return time.Since(start), busy.Load()
}
