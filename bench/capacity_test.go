package bench_test

import (
	"flag"
	"fmt"
	"math/rand"
	"testing"
)

const (
	// uncontendedProcesses and uncontendedGoroutines shape the uncontended rows.
	uncontendedProcesses, uncontendedGoroutines = 8, 8
)

// capacityPrimaries are the cluster sizes of BenchmarkCapacity.
var capacityPrimaries = []int{1, 3, 6}

// uncontendedContenders are the contenders of the uncontended rows: fencekit, and
// bsm/redislock as the control, a lock of plain commands and one short script.
var uncontendedContenders = []contender{fencekitTry, redislockOnce}

// pacedRate is the rate, per primary, that the paced rows of BenchmarkCapacity offer.
var pacedRate = flag.Float64("pacedrate", 2000,
	"sections per second per primary that BenchmarkCapacity's paced rows offer")

// BenchmarkCapacity measures how fencekit's cost spreads over the primaries of a Redis
// Cluster, on local clusters of 1, 3 and 6 primaries that it starts (a 1-primary cluster
// serves all slots on one node). Each size runs these rows, for -rowtime each:
//
//   - uncontended/fencekit-try: 8 processes of 8 goroutines, each goroutine cycling
//     through resources of its own out of 2,000 with TryAcquire and Release, no hold, as
//     fast as it can (a closed loop): the lock's own cost, at the same total load split
//     over more primaries;
//   - uncontended/redislock-once: the same with bsm/redislock's Obtain (no retry) and
//     Release, the control: how the servers' own cost per command changes with the number
//     of primaries on this machine, whatever the library;
//   - many/goroutines=8 and =64: BenchmarkManyResources's workload with Locker.Do;
//   - paced/fencekit-try and paced/redislock-once: the uncontended rows in an open loop, at
//     -pacedrate sections per second per primary (2,000 by default), so that every size
//     gives each primary the same load;
//   - paced/fencekit-do: Locker.Do with a 1 ms hold on resources picked uniformly at random
//     out of the 2,000, paced the same way.
//
// Each row reports sections/s, cmds/section and cpu-us/section (summed over the primaries,
// as in BenchmarkManyResources) with its part in the kernel (sys-cpu-us/section), the waits
// for the lock, and how evenly the primaries shared the work: cmds-max/mean and
// cpu-max/mean (the largest primary's commands or CPU over the mean) and
// busiest-cpu-us/section (the busiest primary's CPU per section of the whole cluster), the
// peak connections, and the primaries' wakeups/section and preemptions/section (the
// voluntary and involuntary context switches of their event-loop threads: how many commands
// a server serves per turn of its loop, and how often it loses its CPU to another process).
// The paced rows also report the rate they offered (offered/s) and the mean primary's CPU in
// percent of a core (core-%/primary). idle-cpu-us/section is the part of cpu-us/section that
// the servers spend on their own background work (cron, the cluster bus), measured for 1 s
// with no traffic before the rows. On 3 and 6 primaries each row logs its cpu-us/section,
// with and without that part, and its sections/s over the same row's on 1 primary.
//
// With -callgrind the servers run under valgrind --tool=callgrind, and each row also reports
// the instructions they executed per section in user space (server-Ir/section, summed over
// the primaries; idle-Ir/section is its background part) and Ir-max/mean: figures that,
// unlike CPU time, do not depend on how the servers and the client share the machine's CPUs.
// The servers then run about 50 times slower: give -pacedrate 25. See README.md for the
// commands.
func BenchmarkCapacity(b *testing.B) {
	results := make(map[int]map[string]rowResult) // by primaries, then row
	for _, n := range capacityPrimaries {
		b.Run(fmt.Sprintf("primaries=%d", n), func(b *testing.B) {
			t := clusterOf(b, n)
			idle := idleWork(b, t)
			results[n] = make(map[string]rowResult)
			for _, row := range capacityRows(n) {
				b.Run(row.name, func(b *testing.B) {
					r := runRow(b, t, row.contender, row.workload)
					r.idle = idle
					r.reportCost(b)
					r.reportSpread(b)
					r.reportIdle(b)
					r.reportWaits(b)
					r.reportConns(b)
					r.reportSwitches(b)
					if row.workload.rate > 0 {
						r.reportLoad(b, row.workload.rate)
					}
					results[n][row.name] = r
					logScaling(b, r, results[1][row.name], n)
				})
			}
		})
	}
}

// A capacityRow is one row of BenchmarkCapacity.
type capacityRow struct {
	name      string
	contender contender
	workload  workload
}

// capacityRows returns the rows of BenchmarkCapacity on a cluster of n primaries, in the
// order they run.
func capacityRows(n int) []capacityRow {
	var rows []capacityRow
	for _, c := range uncontendedContenders {
		rows = append(rows, capacityRow{"uncontended/" + c.name, c, uncontendedWorkload()})
	}
	for _, g := range manyGoroutines {
		rows = append(rows, capacityRow{fmt.Sprintf("many/goroutines=%d", g), fencekitDo, zipfWorkload(g)})
	}
	perSecond := float64(n) * *pacedRate
	for _, c := range uncontendedContenders {
		w := uncontendedWorkload()
		w.rate = perSecond
		rows = append(rows, capacityRow{"paced/" + c.name, c, w})
	}
	w := uniformWorkload()
	w.rate = perSecond
	return append(rows, capacityRow{"paced/" + fencekitDo.name, fencekitDo, w})
}

// uncontendedWorkload returns the uncontended workload: every worker cycles through the
// resources whose number is its own modulo the number of workers, so no two workers ever
// want the same resource.
func uncontendedWorkload() workload {
	return workload{
		processes:  uncontendedProcesses,
		goroutines: uncontendedGoroutines,
		resources:  manyResources,
		picker: func(w, workers int) func() int {
			next := w
			return func() int {
				r := next
				if next += workers; next >= manyResources {
					next = w
				}
				return r
			}
		},
	}
}

// uniformWorkload returns the many-resource workload at 8 goroutines per process (a 1 ms
// hold) with uniform popularity: every worker picks each of the 2,000 resources with the
// same probability, from a generator seeded with its own number.
func uniformWorkload() workload {
	w := zipfWorkload(8)
	w.picker = func(w, _ int) func() int {
		rnd := rand.New(rand.NewSource(int64(w) + 1))
		return func() int { return rnd.Intn(manyResources) }
	}
	return w
}

// logScaling logs r's cpu-us/section, the same less idle-cpu-us/section, its parts in user
// space and in the kernel, and sections/s, on n primaries, over those of one, the same row on
// 1 primary, if n is more than 1 and both ran; under callgrind, server-Ir/section too, with
// and without idle-Ir/section.
func logScaling(b *testing.B, r, one rowResult, n int) {
	if n == 1 || r.sections == 0 || one.sections == 0 {
		return
	}
	rate, _, cpu := r.perSection()
	oneRate, _, oneCPU := one.perSection()
	idleCPU, idleIr := r.idlePerSection()
	oneIdleCPU, oneIdleIr := one.idlePerSection()
	sys, oneSys := r.sysPerSection(), one.sysPerSection()
	b.Logf("over 1 primary: cpu-us/section %.2fx (less idle %.2fx; in user space %.2fx, in the kernel %.2fx), sections/s %.2fx",
		cpu/oneCPU, (cpu-idleCPU)/(oneCPU-oneIdleCPU), (cpu-sys)/(oneCPU-oneSys), sys/oneSys, rate/oneRate)
	if ir, oneIr := r.instructionsPerSection(), one.instructionsPerSection(); ir > 0 && oneIr > 0 {
		b.Logf("over 1 primary: server-Ir/section %.3fx (less idle %.3fx)", ir/oneIr, (ir-idleIr)/(oneIr-oneIdleIr))
	}
}
