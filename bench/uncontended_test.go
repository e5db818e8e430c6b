package bench_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bsm/redislock"
	"github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/fencing"
)

// An uncontendedOp takes a lock on resource and releases it at once.
type uncontendedOp struct {
	name string
	run  func(ctx context.Context, resource string) error
}

// BenchmarkUncontended measures one lock and release with nobody else wanting the resource,
// on the standalone Redis of FENCING_REDIS_ADDR: fencekit's TryAcquire + Release,
// bsm/redislock's Obtain (no retry) + Release (the safe floor: a Lua compare-and-delete, no
// token) and a raw SET NX PX + DEL (the physical floor), at 1 and 16 goroutines on one client.
//
//   - interleaved/goroutines=N: every goroutine runs the three in turn, rotating the order, so
//     all three see the same load; of-redislock and of-raw are fencekit's throughput over
//     theirs (their total time over fencekit's).
//   - <name>/goroutines=N: one of them alone, for Redis's own cost: cmds/op (INFO stats
//     total_commands_processed; commands inside scripts count), cpu-us/op (INFO cpu
//     used_cpu_sys + used_cpu_user) and script-us/call (INFO commandstats: the server's time
//     inside EVALSHA and EVAL per call, the scripts' own cost), and the client's allocations
//     (allocs/op, B/op).
//
// See README.md for the command.
func BenchmarkUncontended(b *testing.B) {
	t := standalone(b)
	client := t.newClient(nil)
	defer client.Close()
	ctx := context.Background()
	if err := connect(ctx, client); err != nil {
		b.Fatal(err)
	}
	ops := uncontendedOps(b, t, client)
	for _, g := range []int{1, 16} {
		b.Run(fmt.Sprintf("interleaved/goroutines=%d", g), func(b *testing.B) {
			total := make([]atomic.Int64, len(ops)) // ns per op name
			loop(b, g, func(w, i int, resource string) error {
				for k := range ops {
					j := (i + k) % len(ops) // rotate the order
					t0 := time.Now()
					if err := ops[j].run(ctx, resource); err != nil {
						return fmt.Errorf("%s: %w", ops[j].name, err)
					}
					total[j].Add(int64(time.Since(t0)))
				}
				return nil
			})
			b.ReportMetric(float64(total[1].Load())/float64(total[0].Load()), "of-redislock")
			b.ReportMetric(float64(total[2].Load())/float64(total[0].Load()), "of-raw")
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

// uncontendedOps returns fencekit's TryAcquire + Release, bsm/redislock's Obtain + Release and
// SET NX PX + DEL on client, in that order, with keys under t's prefix. The Locker is closed
// when b ends.
func uncontendedOps(b *testing.B, t *target, client redis.UniversalClient) []uncontendedOp {
	l := fencing.New(client, fencing.WithPrefix(t.prefix))
	b.Cleanup(func() { _ = l.Close() })
	rl := redislock.New(client)
	return []uncontendedOp{
		{"fencekit", func(ctx context.Context, resource string) error {
			lock, err := l.TryAcquire(ctx, resource)
			if err != nil {
				return err
			}
			return lock.Release(ctx)
		}},
		{"redislock", func(ctx context.Context, resource string) error {
			lock, err := rl.Obtain(ctx, peerKey(t.prefix, "redislock", resource), leaseTTL, nil)
			if err != nil {
				return err
			}
			return lock.Release(ctx)
		}},
		{"raw", func(ctx context.Context, resource string) error {
			key := peerKey(t.prefix, "raw", resource)
			ok, err := client.SetNX(ctx, key, "v", leaseTTL).Result()
			if err != nil || !ok {
				return fmt.Errorf("SET NX: %v, %v", ok, err)
			}
			return client.Del(ctx, key).Err()
		}},
	}
}

// loop runs f b.N times in all from g goroutines; call i of goroutine w locks a resource
// of its own ("u<w>-<i mod 100>"), so that no two goroutines want one at once.
func loop(b *testing.B, g int, f func(w, i int, resource string) error) {
	b.Helper()
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	for w := range g {
		wg.Go(func() {
			for i := 0; next.Add(1) <= int64(b.N); i++ {
				if err := f(w, i, "u"+strconv.Itoa(w)+"-"+strconv.Itoa(i%100)); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
}

// scriptTime reads INFO commandstats of every primary now and returns a function that
// returns the EVALSHA and EVAL calls since, and the microseconds the servers spent in them.
func scriptTime(b *testing.B, t *target) func() (calls, usec int64) {
	b.Helper()
	read := func() (calls, usec int64) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		for _, p := range t.primaries {
			c, u := scriptStats(b, ctx, p)
			calls, usec = calls+c, usec+u
		}
		return calls, usec
	}
	c0, u0 := read()
	return func() (int64, int64) {
		c1, u1 := read()
		return c1 - c0, u1 - u0
	}
}

// scriptStats returns the calls of EVALSHA and EVAL that the server p has run, and the time
// it spent in them, in microseconds (INFO commandstats).
func scriptStats(b *testing.B, ctx context.Context, p *redis.Client) (calls, usec int64) {
	b.Helper()
	info, err := p.Info(ctx, "commandstats").Result()
	if err != nil {
		b.Fatalf("INFO commandstats: %v", err)
	}
	for line := range strings.Lines(info) {
		name, stat, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || (name != "cmdstat_evalsha" && name != "cmdstat_eval") {
			continue
		}
		for kv := range strings.SplitSeq(stat, ",") {
			k, v, _ := strings.Cut(kv, "=")
			n, _ := strconv.ParseInt(v, 10, 64)
			switch k {
			case "calls":
				calls += n
			case "usec":
				usec += n
			}
		}
	}
	return calls, usec
}
