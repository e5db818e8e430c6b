package bench_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencekit/fencekit/fencing"
)

// BenchmarkSets measures fencekit's uncontended lock of two resources at once, TryAcquireAll
// + LockSet.Release, against one TryAcquire + Release, on the standalone Redis of
// FENCING_REDIS_ADDR, at 1 and 16 goroutines on one client.
//
//   - interleaved/goroutines=N: every goroutine runs both in turn, rotating the order, so both
//     see the same load; of-one is the pair's time over the single lock's (the cost of the
//     second resource).
//   - <name>/goroutines=N: one of them alone, with cmds/op (INFO stats
//     total_commands_processed; commands inside scripts count), cpu-us/op and script-us/call
//     as in BenchmarkUncontended, and the client's allocations.
//
// See README.md for the command.
func BenchmarkSets(b *testing.B) {
	t := standalone(b)
	client := t.newClient(nil)
	defer client.Close()
	ctx := context.Background()
	if err := connect(ctx, client); err != nil {
		b.Fatal(err)
	}
	l := fencing.New(client, fencing.WithPrefix(t.prefix))
	defer l.Close()
	ops := []uncontendedOp{
		{"one", func(ctx context.Context, resource string) error {
			lock, err := l.TryAcquire(ctx, resource)
			if err != nil {
				return err
			}
			return lock.Release(ctx)
		}},
		{"pair", func(ctx context.Context, resource string) error {
			// The second resource is listed first: the set sorts them.
			set, err := l.TryAcquireAll(ctx, []string{resource + "-to", resource})
			if err != nil {
				return err
			}
			return set.Release(ctx)
		}},
	}
	for _, g := range []int{1, 16} {
		b.Run(fmt.Sprintf("interleaved/goroutines=%d", g), func(b *testing.B) {
			total := make([]atomic.Int64, len(ops))
			loop(b, g, func(w, i int, resource string) error {
				for k := range ops {
					j := (i + k) % len(ops)
					t0 := time.Now()
					if err := ops[j].run(ctx, resource); err != nil {
						return fmt.Errorf("%s: %w", ops[j].name, err)
					}
					total[j].Add(int64(time.Since(t0)))
				}
				return nil
			})
			b.ReportMetric(float64(total[1].Load())/float64(total[0].Load()), "of-one")
		})
		for _, op := range ops {
			b.Run(fmt.Sprintf("%s/goroutines=%d", op.name, g), func(b *testing.B) {
				b.ReportAllocs()
				before := t.stats(b)
				scripts := scriptTime(b, t)
				loop(b, g, func(_, _ int, resource string) error { return op.run(ctx, resource) })
				cmds, cpu := t.stats(b)[0].sub(before[0]).work()
				calls, usec := scripts()
				b.ReportMetric(float64(cmds)/float64(b.N), "cmds/op")
				b.ReportMetric(us(cpu)/float64(b.N), "cpu-us/op")
				if calls > 0 {
					b.ReportMetric(float64(usec)/float64(calls), "script-us/call")
				}
			})
		}
	}
}
