package fencing_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/internal/testkit/redistest"
)

// BenchmarkAcquireRelease compares TryAcquire+Release with the physical floor on the same
// Redis in the same run: a raw SET NX PX and a DEL, also two round trips. "floor" and
// "fencing" measure each alone (with allocations); "ratio" alternates the two in one loop,
// so both see the same load, and reports the fencing throughput as a fraction of the
// floor's. On a real Redis, "floor" and "fencing" also report server-µs/op, the time the
// server spent executing commands. Run it against a real Redis (FENCING_REDIS_ADDR); on
// miniredis the figures mean little.
//
//	FENCING_REDIS_ADDR=127.0.0.1:6379 go test -run '^$' -bench AcquireRelease -benchtime 3000x -count 3 -benchmem ./fencing/
func BenchmarkAcquireRelease(b *testing.B) {
	r := redistest.New(b)
	l := fencing.New(r.Client, fencing.WithPrefix(r.Prefix))
	defer l.Close()
	floor := func(ctx context.Context, id string) error {
		key := r.Prefix + "raw:" + id
		if err := r.Client.SetArgs(ctx, key, "v", redis.SetArgs{Mode: "NX", TTL: fencing.DefaultTTL}).Err(); err != nil {
			return err
		}
		return r.Client.Del(ctx, key).Err()
	}
	fenced := func(ctx context.Context, id string) error {
		lock, err := l.TryAcquire(ctx, id)
		if err != nil {
			return err
		}
		return lock.Release(ctx)
	}
	for _, g := range []int{1, 16} {
		b.Run(fmt.Sprintf("floor/goroutines=%d", g), func(b *testing.B) {
			defer serverTime(b, r)()
			runParallel(b, g, floor)
		})
		b.Run(fmt.Sprintf("fencing/goroutines=%d", g), func(b *testing.B) {
			defer serverTime(b, r)()
			runParallel(b, g, fenced)
		})
		b.Run(fmt.Sprintf("ratio/goroutines=%d", g), func(b *testing.B) {
			var floorNS, fencedNS atomic.Int64
			runParallel(b, g, func(ctx context.Context, id string) error {
				t0 := time.Now()
				if err := floor(ctx, id); err != nil {
					return err
				}
				t1 := time.Now()
				if err := fenced(ctx, id); err != nil {
					return err
				}
				floorNS.Add(int64(t1.Sub(t0)))
				fencedNS.Add(int64(time.Since(t1)))
				return nil
			})
			b.ReportMetric(float64(floorNS.Load())/float64(fencedNS.Load()), "of-floor")
		})
	}
	// The server-time floor's cost: the default and WithServerTimeFloor alternate in one loop;
	// "of-default" is the floored throughput as a fraction of the default's, and cmds/op counts
	// the commands of both cycles.
	floored := fencing.New(r.Client, fencing.WithPrefix(r.Prefix+"floored:"), fencing.WithServerTimeFloor())
	defer floored.Close()
	b.Run("timefloor-ratio/goroutines=1", func(b *testing.B) {
		defer serverTime(b, r)() // cmds/op: both cycles, the default's and the floored one
		var plainNS, flooredNS time.Duration
		runParallel(b, 1, func(ctx context.Context, id string) error {
			t0 := time.Now()
			if err := fenced(ctx, id); err != nil {
				return err
			}
			t1 := time.Now()
			lock, err := floored.TryAcquire(ctx, id)
			if err != nil {
				return err
			}
			if err := lock.Release(ctx); err != nil {
				return err
			}
			plainNS += t1.Sub(t0)
			flooredNS += time.Since(t1)
			return nil
		})
		b.ReportMetric(float64(plainNS)/float64(flooredNS), "of-default")
	})
}

// serverTime reports, on a real Redis, the time the server spent executing commands per
// operation ("server-µs/op") and the commands it ran per operation ("cmds/op", commands
// inside scripts included), from the change in INFO commandstats between the call and the
// returned function's. Other clients of the server count too; keep it otherwise idle.
func serverTime(b *testing.B, r *redistest.Redis) func() {
	if r.Mini != nil {
		return func() {}
	}
	usec, calls, err := commandStats(r)
	if err != nil {
		b.Fatal(err)
	}
	return func() {
		usec2, calls2, err := commandStats(r)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(usec2-usec)/float64(b.N), "server-µs/op")
		b.ReportMetric(float64(calls2-calls-1)/float64(b.N), "cmds/op") // less the first INFO
	}
}

// commandStats sums the usec and calls fields of INFO commandstats: the microseconds the
// server has spent executing commands, and the commands it ran, since its statistics were
// last reset.
func commandStats(r *redistest.Redis) (usec, calls int64, err error) {
	info, err := r.Client.Info(context.Background(), "commandstats").Result()
	if err != nil {
		return 0, 0, err
	}
	for line := range strings.Lines(info) {
		// cmdstat_set:calls=20002,usec=13092,usec_per_call=0.65,...
		_, stats, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(line, "cmdstat_") {
			continue
		}
		for field := range strings.SplitSeq(stats, ",") {
			k, v, _ := strings.Cut(field, "=")
			if k != "usec" && k != "calls" {
				continue
			}
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return 0, 0, fmt.Errorf("commandstats %q: %w", line, err)
			}
			if k == "usec" {
				usec += n
			} else {
				calls += n
			}
		}
	}
	return usec, calls, nil
}

// runParallel runs op b.N times over g goroutines, each with its own id.
func runParallel(b *testing.B, g int, op func(ctx context.Context, id string) error) {
	b.ReportAllocs()
	ctx := context.Background()
	if g == 1 {
		for b.Loop() {
			if err := op(ctx, "g0"); err != nil {
				b.Fatal(err)
			}
		}
		return
	}
	b.SetParallelism((g + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
	var next atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		id := "g" + strconv.FormatInt(next.Add(1), 10)
		for pb.Next() {
			if err := op(ctx, id); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkContention measures hand-off under contention: workers goroutines take locks on
// resources resources and hold each for 1ms (time.Sleep, or a spin with hold=spin). It
// reports critical sections per second as a fraction of the ideal, where the ideal is every
// resource held back to back (up to one per worker) for the hold actually taken (a 1ms sleep
// lasts ~1.2ms on a VM with a coarse timer), and the p50, p99 and worst wait for a lock.
// "poll5ms" is the baseline a plain loop of TryAcquire and a 5ms sleep achieves on the same
// Redis in the same run; "lockers=8" gives every worker a Locker of its own, as if each were
// a process.
//
//	FENCING_REDIS_ADDR=127.0.0.1:6379 go test -run '^$' -bench Contention -benchtime 3000x ./fencing/
func BenchmarkContention(b *testing.B) {
	const holdTime = time.Millisecond
	cases := []struct {
		mode                        string
		workers, resources, lockers int
		spin                        bool // hold by spinning, so the CPUs never go idle
	}{
		{"wake", 8, 1, 1, false}, {"poll5ms", 8, 1, 1, false},
		{"wake", 8, 1, 8, false}, // one Locker per worker, as if each were a process of its own
		{"wake", 10, 100, 1, false}, {"poll5ms", 10, 100, 1, false},
		{"wake", 8, 1, 1, true}, {"poll5ms", 8, 1, 1, true},
	}
	for _, c := range cases {
		mode := c.mode
		hold := map[bool]string{false: "sleep", true: "spin"}[c.spin]
		b.Run(fmt.Sprintf("%s/workers=%d/resources=%d/lockers=%d/hold=%s", mode, c.workers, c.resources, c.lockers, hold), func(b *testing.B) {
			r := redistest.New(b)
			lockers := make([]*fencing.Locker, c.lockers)
			for i := range lockers {
				lockers[i] = fencing.New(r.NewClient(b), fencing.WithPrefix(r.Prefix))
				defer lockers[i].Close()
			}
			acquire := func(ctx context.Context, l *fencing.Locker, res string) (*fencing.Lock, error) {
				if mode == "wake" {
					return l.Acquire(ctx, res)
				}
				for {
					lock, err := l.TryAcquire(ctx, res)
					if err == nil || ctx.Err() != nil {
						return lock, err
					}
					time.Sleep(5 * time.Millisecond)
				}
			}
			var done atomic.Int64
			var held atomic.Int64 // total time the locks were held, ns
			waits := make([][]time.Duration, c.workers)
			var wg sync.WaitGroup
			begin := time.Now()
			for w := range c.workers {
				wg.Go(func() {
					ctx := context.Background()
					for done.Add(1) <= int64(b.N) {
						res := "r" + strconv.Itoa(rand.IntN(c.resources))
						t0 := time.Now()
						lock, err := acquire(ctx, lockers[w%len(lockers)], res)
						if err != nil {
							b.Error(err)
							return
						}
						waits[w] = append(waits[w], time.Since(t0))
						h0 := time.Now()
						if c.spin {
							for time.Since(h0) < holdTime {
							}
						} else {
							time.Sleep(holdTime)
						}
						held.Add(int64(time.Since(h0)))
						if err := lock.Release(ctx); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			elapsed := time.Since(begin)
			all := slices.Concat(waits...)
			slices.Sort(all)
			if len(all) == 0 {
				return
			}
			meanHold := time.Duration(held.Load() / int64(len(all)))
			ideal := float64(min(c.workers, c.resources)) / meanHold.Seconds()
			b.ReportMetric(float64(len(all))/elapsed.Seconds()/ideal, "of-ideal")
			b.ReportMetric(float64(len(all))/elapsed.Seconds(), "sections/s")
			b.ReportMetric(ms(meanHold), "hold-ms")
			b.ReportMetric(ms(all[len(all)/2]), "p50-wait-ms")
			b.ReportMetric(ms(all[len(all)*99/100]), "p99-wait-ms")
			b.ReportMetric(ms(all[len(all)-1]), "max-wait-ms")
		})
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// BenchmarkRoundTrip times a PING sent back to back and one sent after the 1ms sleep that
// BenchmarkContention's holders make: on a VM the second pays for waking idle CPUs, and a
// hand-off pays it on every release.
func BenchmarkRoundTrip(b *testing.B) {
	r := redistest.New(b)
	ctx := context.Background()
	for _, idle := range []time.Duration{0, time.Millisecond} {
		b.Run(fmt.Sprintf("after-sleep=%v", idle), func(b *testing.B) {
			var total time.Duration
			for b.Loop() {
				if idle > 0 {
					time.Sleep(idle)
				}
				t0 := time.Now()
				if err := r.Client.Ping(ctx).Err(); err != nil {
					b.Fatal(err)
				}
				total += time.Since(t0)
			}
			b.ReportMetric(float64(total.Microseconds())/float64(b.N), "ping-µs")
		})
	}
}

// BenchmarkCounterMemory locks b.N distinct resources once each and reports how much the
// server's used_memory grew per resource ("B/resource") and in all ("MB"): with counters that
// never expire (the default), and with WithCounterExpiry(1s) once the idle period has passed
// (it waits until Redis has removed the expired counters, up to two minutes). It deletes its
// keys afterwards. Run it on a private, otherwise idle Redis:
//
//	FENCING_REDIS_ADDR=127.0.0.1:6390 go test -run '^$' -bench CounterMemory -benchtime 1000000x -timeout 30m ./fencing/
func BenchmarkCounterMemory(b *testing.B) {
	r := redistest.New(b)
	if r.Mini != nil {
		b.Skip("measures a real Redis's used_memory; runs with FENCING_REDIS_ADDR")
	}
	ctx := context.Background()
	for _, mode := range []struct {
		name string
		opts []fencing.Option
	}{
		{"never", nil},
		{"expiry=1s", []fencing.Option{fencing.WithCounterExpiry(time.Second), fencing.WithTTL(time.Second)}},
	} {
		b.Run(mode.name, func(b *testing.B) {
			prefix := r.Prefix + mode.name + ":"
			l := fencing.New(r.Client, append([]fencing.Option{fencing.WithPrefix(prefix)}, mode.opts...)...)
			defer l.Close()
			keys := r.Client.DBSize(ctx).Val()
			before := usedMemory(b, r)
			var next atomic.Int64
			var wg sync.WaitGroup
			for range 32 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := next.Add(1); i <= int64(b.N); i = next.Add(1) {
						lock, err := l.TryAcquire(ctx, "r"+strconv.FormatInt(i, 10))
						if err == nil {
							err = lock.Release(ctx)
						}
						if err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			if len(mode.opts) > 0 {
				deadline := time.Now().Add(2 * time.Minute)
				for r.Client.DBSize(ctx).Val() > keys && time.Now().Before(deadline) {
					time.Sleep(250 * time.Millisecond)
				}
			}
			grown := usedMemory(b, r) - before
			b.ReportMetric(float64(grown)/float64(b.N), "B/resource")
			b.ReportMetric(float64(grown)/1e6, "MB")
			b.StopTimer()
			deletePrefix(b, r, prefix)
		})
	}
}

// usedMemory returns INFO memory's used_memory.
func usedMemory(b *testing.B, r *redistest.Redis) int64 {
	info := r.Client.Info(context.Background(), "memory").Val()
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return n
		}
	}
	b.Fatal("no used_memory in INFO memory")
	return 0
}

// deletePrefix unlinks every key under prefix, in batches.
func deletePrefix(b *testing.B, r *redistest.Redis, prefix string) {
	ctx := context.Background()
	iter := r.Client.Scan(ctx, 0, prefix+"*", 10000).Iterator()
	batch := make([]string, 0, 1000)
	flush := func() {
		if len(batch) > 0 {
			if err := r.Client.Unlink(ctx, batch...).Err(); err != nil {
				b.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	for iter.Next(ctx) {
		if batch = append(batch, iter.Val()); len(batch) == cap(batch) {
			flush()
		}
	}
	flush()
	if err := iter.Err(); err != nil {
		b.Fatal(err)
	}
}
