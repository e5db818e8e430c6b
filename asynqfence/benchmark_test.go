package asynqfence_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/fencekit/fencekit/asynqfence"
	"github.com/fencekit/fencekit/internal/testkit/redistest"
)

// The benchmarks need a real Redis:
//
//	FENCING_REDIS_ADDR=127.0.0.1:6379 go test -run '^$' -bench . -benchtime 2s -count 3 ./asynqfence/
//
// Every job locks a resource of its own, so none is ever busy: they measure the adapter's
// cost, not contention.

func skipUnlessRealRedis(b *testing.B) {
	if !redistest.Real() {
		b.Skip("set FENCING_REDIS_ADDR to benchmark against a real Redis")
	}
}

// BenchmarkProcessTask calls ProcessTask directly: the adapter's cost per job (an acquire
// and a release, two round trips) against the same handler unwrapped.
func BenchmarkProcessTask(b *testing.B) {
	skipUnlessRealRedis(b)
	tasks := make([]*asynq.Task, 4096)
	for i := range tasks {
		tasks[i] = asynq.NewTask("job", fmt.Appendf(nil, "r-%d", i))
	}
	noop := asynq.HandlerFunc(func(context.Context, *asynq.Task) error { return nil })
	for _, fenced := range []bool{false, true} {
		name := "bare"
		if fenced {
			name = "fenced"
		}
		b.Run(name, func(b *testing.B) {
			var h asynq.Handler = noop
			if fenced {
				r := redistest.New(b)
				h = asynqfence.Wrap(noop, newLocker(b, r), byPayload)
			}
			// Asynq's handler context has the task's deadline.
			ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
			defer cancel()
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				if err := h.ProcessTask(ctx, tasks[i%len(tasks)]); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
		})
		b.Run(name+"-parallel", func(b *testing.B) {
			var h asynq.Handler = noop
			if fenced {
				r := redistest.New(b)
				h = asynqfence.Wrap(noop, newLocker(b, r), byPayload)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
			defer cancel()
			var next atomic.Int64
			b.SetParallelism(5) // about ten jobs in flight on two CPUs, as a server with ten workers
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					// Distinct resources among the jobs in flight.
					if err := h.ProcessTask(ctx, tasks[int(next.Add(1))%len(tasks)]); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
		})
	}
}

// BenchmarkRoundTrip is one PING: the unit the adapter's cost is counted in.
func BenchmarkRoundTrip(b *testing.B) {
	skipUnlessRealRedis(b)
	r := redistest.New(b)
	ctx := context.Background()
	for b.Loop() {
		if err := r.Client.Ping(ctx).Err(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkServer drains a queue of b.N jobs through a real asynq.Server with ten workers,
// with and without the adapter. Enqueueing is not timed.
func BenchmarkServer(b *testing.B) {
	skipUnlessRealRedis(b)
	for _, fenced := range []bool{false, true} {
		name := "bare"
		if fenced {
			name = "fenced"
		}
		b.Run(name, func(b *testing.B) {
			h := newHarness(b)
			var done atomic.Int64
			finished := make(chan struct{})
			var handler asynq.Handler = asynq.HandlerFunc(func(context.Context, *asynq.Task) error {
				if done.Add(1) == int64(b.N) {
					close(finished)
				}
				return nil
			})
			if fenced {
				handler = asynqfence.Wrap(handler, h.locker, byPayload)
			}
			for i := range b.N {
				if _, err := h.client.Enqueue(asynq.NewTask("job", fmt.Appendf(nil, "r-%d", i)), asynq.Queue(h.queue)); err != nil {
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			h.serve(b, handler, asynq.Config{Concurrency: 10})
			select {
			case <-finished:
			case <-time.After(5 * time.Minute):
				b.Fatalf("%d of %d jobs done after 5m", done.Load(), b.N)
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
		})
	}
}
