package bench_test

import (
	"fmt"
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

// BenchmarkCapacity measures how fencekit's cost spreads over the primaries of a Redis
// Cluster, on local clusters of 1, 3 and 6 primaries that it starts (a 1-primary cluster
// serves all slots on one node). Each size runs two workloads, for -rowtime each:
//
//   - uncontended/fencekit-try: 8 processes of 8 goroutines, each goroutine cycling
//     through resources of its own out of 2,000 with TryAcquire and Release, no hold: the
//     lock's own cost;
//   - uncontended/redislock-once: the same with bsm/redislock's Obtain (no retry) and
//     Release, the control: how the servers' own cost per command changes with the number
//     of primaries on this machine, whatever the library;
//   - many/goroutines=8 and =64: BenchmarkManyResources's workload with Locker.Do.
//
// Each row reports sections/s, cmds/section and cpu-us/section (summed over the primaries,
// as in BenchmarkManyResources), and how evenly the primaries shared the work:
// cmds-max/mean and cpu-max/mean (the largest primary's commands or CPU over the mean) and
// busiest-cpu-us/section (the busiest primary's CPU per section of the whole cluster). The
// many rows also report the waits and the peak connections. idle-cpu-us/section is the
// part of cpu-us/section that the servers spend on their own background work (cron, the
// cluster bus), measured for 1 s with no traffic before the rows. On 3 and 6 primaries each
// row logs its cpu-us/section and sections/s over the same row's on 1 primary. See
// README.md for the commands.
func BenchmarkCapacity(b *testing.B) {
	results := make(map[int]map[string]rowResult) // by primaries, then row
	for _, n := range capacityPrimaries {
		b.Run(fmt.Sprintf("primaries=%d", n), func(b *testing.B) {
			t := clusterOf(b, n)
			idle := idleCPU(b, t)
			results[n] = make(map[string]rowResult)
			for _, c := range uncontendedContenders {
				row := "uncontended/" + c.name
				b.Run(row, func(b *testing.B) {
					r := runRow(b, t, c, uncontendedWorkload())
					r.reportCost(b)
					r.reportSpread(b)
					r.reportIdle(b, idle)
					results[n][row] = r
					logScaling(b, r, results[1][row], n)
				})
			}
			for _, g := range manyGoroutines {
				row := fmt.Sprintf("many/goroutines=%d", g)
				b.Run(row, func(b *testing.B) {
					r := runRow(b, t, fencekitDo, zipfWorkload(g))
					r.reportCost(b)
					r.reportSpread(b)
					r.reportIdle(b, idle)
					r.reportWaits(b)
					r.reportConns(b)
					results[n][row] = r
					logScaling(b, r, results[1][row], n)
				})
			}
		})
	}
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

// logScaling logs r's cpu-us/section and sections/s, on n primaries, over those of one,
// the same row on 1 primary, if n is more than 1 and both ran.
func logScaling(b *testing.B, r, one rowResult, n int) {
	if n == 1 || r.sections == 0 || one.sections == 0 {
		return
	}
	rate, _, cpu := r.perSection()
	oneRate, _, oneCPU := one.perSection()
	b.Logf("over 1 primary: cpu-us/section %.2fx, sections/s %.2fx", cpu/oneCPU, rate/oneRate)
}
