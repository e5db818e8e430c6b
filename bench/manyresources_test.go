package bench_test

import (
	"fmt"
	"math/rand"
	"testing"
)

const (
	// manyProcesses is the number of processes of the many-resource rows.
	manyProcesses = 8
	// manyResources is the number of resources they pick from.
	manyResources = 2000
	// zipfS is the exponent of the resources' Zipf popularity: the resource of rank k
	// (from 1) is picked with a probability proportional to k^-zipfS.
	zipfS = 1.1
)

// manyGoroutines are the goroutines per process of the many-resource rows.
var manyGoroutines = []int{8, 64}

// manyContenders are the contenders of BenchmarkManyResources, in the order they run. The
// first, bsm/redislock, is the baseline the other rows' ratios divide by.
var manyContenders = []contender{bsmRedislock, fencekitDo, redsyncMutex}

// BenchmarkManyResources measures many resources of uneven popularity locked from many
// processes: 8 processes, each a client of its own (and for fencekit a Locker of its own),
// of 8 or 64 goroutines each. Every goroutine, again and again, picks one of 2,000
// resources with Zipf(1.1) popularity (a few hot, a long cold tail), takes its lock, sleeps
// 1 ms while holding it and releases it, for -rowtime (3 s by default); the sections under
// way then finish. Every goroutine draws from a generator seeded with its own number, so
// every contender sees the same sequences of resources. The contenders are fencekit's
// Locker.Do, bsm/redislock and redsync, each retrying every 1 ms.
//
// The "standalone" family runs against the Redis named by FENCING_REDIS_ADDR, which must be
// private and otherwise idle (its INFO is read); the "cluster" family against a local
// three-primary Redis Cluster that it starts. Each row reports:
//
//   - sections/s: critical sections per second;
//   - p50-wait-ms, p99-wait-ms, max-wait-ms: how long a goroutine waited for the lock;
//   - hold-ms: how long a section held the lock, on average (the 1 ms sleep overruns);
//   - max-wait-held-ms: how much of the longest wait other sections held the waiter's
//     resource, the part of it that only a lock serving the waiter out of turn could
//     shorten (the rest is hand-overs);
//   - r0-interval-ms, r0-gap-ms: on r0, the most wanted resource, the mean time from the
//     start of one section to the start of the next, and the median time from the end of
//     one to the start of the next (see reportHot);
//   - cmds/section, cpu-us/section: commands the primaries processed (INFO stats
//     total_commands_processed) and CPU time they used (INFO cpu used_cpu_sys +
//     used_cpu_user), per section, summed over the primaries, less the benchmark's own INFO
//     and CLIENT LIST calls;
//   - peak-conns, peak-pubsub: the processes' connections, and those in pub/sub mode, on
//     all primaries together, at the peak of CLIENT LIST samples taken every 100 ms;
//     peak-conns/proc and peak-pubsub/proc: the same for the process that held the most;
//   - on the cluster, cmds-max/mean, cpu-max/mean and busiest-cpu-us/section: how evenly
//     the primaries shared the work (see BenchmarkCapacity).
//
// The rows after bsm/redislock's log their figures over its figures of the same goroutine
// count. A section that finds another holder of its resource fails the
// benchmark. See README.md for the commands.
func BenchmarkManyResources(b *testing.B) {
	b.Run("standalone", func(b *testing.B) { manyRows(b, standalone(b)) })
	b.Run("cluster", func(b *testing.B) { manyRows(b, cluster(b)) })
}

// manyRows runs the many-resource rows against t.
func manyRows(b *testing.B, t *target) {
	for _, g := range manyGoroutines {
		b.Run(fmt.Sprintf("goroutines=%d", g), func(b *testing.B) {
			var base *rowResult // the baseline's row, once it has run
			for i, c := range manyContenders {
				b.Run(c.name, func(b *testing.B) {
					r := runRow(b, t, c, zipfWorkload(g))
					r.reportCost(b)
					r.reportWaits(b)
					r.reportHot(b)
					r.reportConns(b)
					if len(t.primaries) > 1 {
						r.reportSpread(b)
					}
					if i == 0 {
						base = &r
					} else if base != nil {
						logRatios(b, r, *base, manyContenders[0].name)
					}
				})
			}
		})
	}
}

// zipfWorkload returns the many-resource workload at goroutines per process.
func zipfWorkload(goroutines int) workload {
	return workload{
		processes:  manyProcesses,
		goroutines: goroutines,
		resources:  manyResources,
		hold:       holdTime,
		picker: func(w, _ int) func() int {
			// math/rand/v2 has no Zipf generator; math/rand's takes any s > 1. With v = 1
			// it draws k in [0, imax] with probability proportional to (k+1)^-s.
			z := rand.NewZipf(rand.New(rand.NewSource(int64(w)+1)), zipfS, 1, manyResources-1)
			return func() int { return int(z.Uint64()) }
		},
	}
}

// logRatios logs r's sections/s, cmds/section, cpu-us/section, max-wait-ms and
// max-wait-held-ms over base's, the row of the contender named baseName; the last over
// base's max-wait-ms, how long r's longest wait would be over base's if every hand-over
// took no time at all.
func logRatios(b *testing.B, r, base rowResult, baseName string) {
	if r.sections == 0 || base.sections == 0 {
		return
	}
	rate, cmds, cpu := r.perSection()
	baseRate, baseCmds, baseCPU := base.perSection()
	baseWorst := ms(base.waits[len(base.waits)-1])
	b.Logf("over %s: sections/s %.2fx, cmds/section %.2fx, cpu-us/section %.2fx, max-wait-ms %.2fx, max-wait-held-ms %.2fx",
		baseName, rate/baseRate, cmds/baseCmds, cpu/baseCPU,
		ms(r.waits[len(r.waits)-1])/baseWorst, ms(r.worstHeld)/baseWorst)
}
