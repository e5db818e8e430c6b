package bench_test

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/time/rate"
)

// rowTime is how long each row of BenchmarkManyResources and BenchmarkCapacity starts new
// critical sections; the sections under way then finish.
var rowTime = flag.Duration("rowtime", 3*time.Second,
	"how long each row of BenchmarkManyResources and BenchmarkCapacity starts new critical sections")

// A workload is what the goroutines of one timed row do.
type workload struct {
	// processes is the number of processes, each a client of its own; goroutines is per
	// process.
	processes, goroutines int
	// resources is the number of resources, named r0 to r<resources-1>.
	resources int
	// hold is how long each section sleeps while it holds the lock.
	hold time.Duration
	// picker returns, for worker w of workers, the function that picks the resource of its
	// next section. Each worker calls its own function only.
	picker func(w, workers int) func() int
	// rate, when above 0, paces the row (an open loop): sections start at rate per second
	// in all, each taken by whichever worker is free (see pace). At 0, every worker starts
	// its next section as soon as its last one ends (a closed loop).
	rate float64
}

const (
	// paceBurst is how many seconds' worth of starts the pacer's token bucket holds: a
	// pacer that wakes up late (on 2 vCPUs shared with the servers, tens of milliseconds
	// late at times) catches up by that much at most.
	paceBurst = 0.1
	// paceQueue is how many starts wait at most for a free worker; past that the pacer
	// waits too, and the row offers less than its rate.
	paceQueue = 4096
)

// A rowResult is what one timed row measured.
type rowResult struct {
	// sections is how many critical sections ran, in elapsed: from the start of the row to
	// the end of the last section.
	sections int
	elapsed  time.Duration
	// waits holds every section's wait for the lock, sorted.
	waits []time.Duration
	// primaries holds each primary's work during the row, the benchmark's own INFO and
	// CLIENT LIST calls taken out.
	primaries []serverStats
	// peaks are the processes' connections at the peak.
	peaks connPeaks
	// idle is the work each primary did with no traffic during a span of its own, when the
	// benchmark measured it (idleWork); empty if not.
	idle []serverStats
	// hold is the mean time a section held the lock: w.hold, and however long the sleep
	// overran it.
	hold time.Duration
	// hot holds the holds on r0, the resource the workload's picker favours most when it
	// has one (zipfWorkload), in the order they started.
	hot []span
	// worstHeld is how much of the longest wait others held the waiter's resource: the
	// holds (the sleeps, overrun and all) of the sections that had it while that section
	// waited. No first-come, first-served lock serves a waiter before the sections queued
	// ahead of it, so this part of the longest wait stays whatever the hand-over costs; the
	// rest of the wait is hand-overs (see worstHeldOf).
	worstHeld time.Duration
}

// A span is one hold of a lock, from the moment the section had it to the moment it was
// about to give it back.
type span struct{ start, end time.Time }

// A section is one critical section of a row: the resource, when it asked for the lock,
// and its hold.
type section struct {
	resource int
	asked    time.Time
	span
}

// runRow runs w on t with contender c for rowTime: every worker goroutine takes the lock on
// the resource it picks, holds it for w.hold and releases it, again and again (when the
// pacer lets it, if w.rate is set), until rowTime has passed; the sections under way then
// finish, and so do those the pacer let start before then. It fails b when two holders of
// one resource overlap or a section fails.
func runRow(b *testing.B, t *target, c contender, w workload) rowResult {
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	tracker := newConnTracker()
	procs := make([]process, w.processes)
	for i := range procs {
		client := t.newClient(tracker.dialer(i))
		defer client.Close()
		// Connect to every primary (and, on a cluster, load the slots) before the work is
		// counted.
		if err := connect(ctx, client); err != nil {
			b.Fatalf("connect: %v", err)
		}
		procs[i] = c.newProcess(client, t.prefix)
		defer procs[i].close()
	}
	names := make([]string, w.resources)
	for i := range names {
		names[i] = fmt.Sprintf("r%d", i)
	}
	holders := make([]atomic.Int32, w.resources) // holders of each resource right now

	workers := w.processes * w.goroutines
	done := make([][]section, workers) // the sections of each worker
	// The connection samples that open and close the row fall outside its figures.
	stopSampling := sampleConnections(b, t, tracker, w.processes)
	before := t.stats(b)
	b.ResetTimer()
	begin := time.Now()
	deadline := begin.Add(*rowTime)
	next := func() bool { return time.Now().Before(deadline) }
	if w.rate > 0 {
		next = pace(ctx, w.rate, deadline)
	}
	var wg sync.WaitGroup
	for worker := range workers {
		p := procs[worker/w.goroutines]
		pick := w.picker(worker, workers)
		wg.Go(func() {
			for next() {
				s := section{resource: pick(), asked: time.Now()}
				r := s.resource
				err := p.section(ctx, names[r], func() {
					s.start = time.Now()
					if n := holders[r].Add(1); n != 1 {
						b.Errorf("%s: %d holders of %s at once", c.name, n, names[r])
					}
					if w.hold > 0 {
						time.Sleep(w.hold)
					}
					holders[r].Add(-1)
					s.end = time.Now()
					done[worker] = append(done[worker], s)
				})
				if err != nil {
					b.Errorf("%s: %s: %v", c.name, names[r], err)
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(begin)
	b.StopTimer()
	after := t.stats(b)
	peaks := stopSampling()

	all := slices.Concat(done...)
	r := rowResult{elapsed: elapsed, sections: len(all), peaks: peaks, worstHeld: worstHeldOf(all)}
	var held time.Duration
	for _, s := range all {
		r.waits = append(r.waits, s.start.Sub(s.asked))
		held += s.end.Sub(s.start)
		if s.resource == 0 {
			r.hot = append(r.hot, s.span)
		}
	}
	slices.Sort(r.waits)
	if r.sections > 0 {
		r.hold = held / time.Duration(r.sections)
	}
	slices.SortFunc(r.hot, func(a, b span) int { return a.start.Compare(b.start) })
	for i := range after {
		r.primaries = append(r.primaries, after[i].sub(before[i]))
	}
	return r
}

// worstHeldOf returns how much of the longest wait among sections others held the
// waiter's resource: the overlap of that wait with the holds of the other sections on the
// same resource.
func worstHeldOf(sections []section) time.Duration {
	worst := -1
	for i, s := range sections {
		if worst < 0 || s.start.Sub(s.asked) > sections[worst].start.Sub(sections[worst].asked) {
			worst = i
		}
	}
	if worst < 0 {
		return 0
	}
	w := sections[worst]
	var held time.Duration
	for i, s := range sections {
		if i == worst || s.resource != w.resource {
			continue
		}
		from, to := s.start, s.end
		if from.Before(w.asked) {
			from = w.asked
		}
		if to.After(w.start) {
			to = w.start
		}
		held += max(to.Sub(from), 0)
	}
	return held
}

// pace starts a pacer that lets perSecond sections start per second until deadline, and
// returns the function a worker calls before each section: it waits for the pacer's next
// start and reports whether there is one, false once the deadline has passed and every
// start has been taken. The pacer is a token bucket (golang.org/x/time/rate) that starts
// empty and holds paceBurst seconds' worth of starts; they wait for a free worker in a queue
// of paceQueue, so that the sections' latency does not lower the rate offered while the
// workers keep up. The pacer stops when ctx ends.
func pace(ctx context.Context, perSecond float64, deadline time.Time) (next func() bool) {
	burst := max(1, int(perSecond*paceBurst))
	limiter := rate.NewLimiter(rate.Limit(perSecond), burst)
	limiter.AllowN(time.Now(), burst) // empty: no burst at the start
	starts := make(chan struct{}, paceQueue)
	go func() {
		defer close(starts)
		for limiter.Wait(ctx) == nil && time.Now().Before(deadline) {
			select {
			case starts <- struct{}{}:
			case <-ctx.Done():
				return
			}
		}
	}()
	return func() bool {
		_, ok := <-starts
		return ok
	}
}

// connect opens a connection from client to every primary it knows.
func connect(ctx context.Context, client redis.UniversalClient) error {
	if cc, ok := client.(*redis.ClusterClient); ok {
		if err := cc.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
			return node.Ping(ctx).Err()
		}); err != nil {
			return err
		}
		// The first command through the cluster client also loads its command table
		// (COMMAND, a large reply, once per client).
	}
	return client.Ping(ctx).Err()
}

// work returns the commands and the CPU time of every primary together.
func (r rowResult) work() (commands int64, cpu time.Duration) {
	for _, s := range r.primaries {
		n, c := s.work()
		commands += n
		cpu += c
	}
	return commands, cpu
}

// perSection returns the figures that most rows report, per critical section: sections per
// second, Redis commands per section and Redis CPU per section in µs, summed over the
// primaries.
func (r rowResult) perSection() (rate, cmds, cpuUS float64) {
	n := float64(r.sections)
	commands, cpu := r.work()
	return n / r.elapsed.Seconds(), float64(commands) / n, us(cpu) / n
}

// reportCost reports sections/s, cmds/section, cpu-us/section and its part in the kernel,
// sys-cpu-us/section, and under callgrind server-Ir/section, and suppresses ns/op,
// which the benchmark's b.N does not drive. It reports nothing when no section ran.
func (r rowResult) reportCost(b *testing.B) {
	b.ReportMetric(0, "ns/op")
	if r.sections == 0 {
		return
	}
	rate, cmds, cpu := r.perSection()
	b.ReportMetric(rate, "sections/s")
	b.ReportMetric(cmds, "cmds/section")
	b.ReportMetric(cpu, "cpu-us/section")
	b.ReportMetric(r.sysPerSection(), "sys-cpu-us/section")
	if ir := r.instructionsPerSection(); ir > 0 {
		b.ReportMetric(ir, "server-Ir/section")
	}
}

// sysPerSection returns the primaries' CPU in the kernel per section, in µs, summed over them.
func (r rowResult) sysPerSection() float64 {
	var sys time.Duration
	for _, p := range r.primaries {
		sys += p.sys
	}
	return us(sys) / float64(r.sections)
}

// instructionsPerSection returns the instructions the primaries executed per section,
// summed over them, when they run under callgrind; 0 otherwise.
func (r rowResult) instructionsPerSection() float64 {
	var n int64
	for _, s := range r.primaries {
		n += s.instructions
	}
	return float64(n) / float64(r.sections)
}

// reportWaits reports the median, 99th percentile and longest waits for the lock.
func (r rowResult) reportWaits(b *testing.B) {
	if r.sections == 0 {
		return
	}
	b.ReportMetric(ms(r.waits[len(r.waits)/2]), "p50-wait-ms")
	b.ReportMetric(ms(r.waits[len(r.waits)*99/100]), "p99-wait-ms")
	b.ReportMetric(ms(r.waits[len(r.waits)-1]), "max-wait-ms")
}

// reportConns reports the peak connections and pub/sub connections, of all processes and
// of the process that held the most.
func (r rowResult) reportConns(b *testing.B) {
	b.ReportMetric(float64(r.peaks.conns), "peak-conns")
	b.ReportMetric(float64(r.peaks.pubsub), "peak-pubsub")
	b.ReportMetric(float64(r.peaks.procConns), "peak-conns/proc")
	b.ReportMetric(float64(r.peaks.procPubsub), "peak-pubsub/proc")
}

// spread returns how evenly the work spread over the primaries: the largest primary's
// commands, CPU and instructions (0 when not under callgrind) over the mean of all
// primaries', and the busiest primary's CPU per section, in µs.
func (r rowResult) spread() (cmdsMaxMean, cpuMaxMean, irMaxMean, busiestCPUUS float64) {
	var cmdSum, cmdMax, irSum, irMax int64
	var cpuSum, cpuMax time.Duration
	for _, s := range r.primaries {
		n, c := s.work()
		cmdSum, cmdMax = cmdSum+n, max(cmdMax, n)
		cpuSum, cpuMax = cpuSum+c, max(cpuMax, c)
		irSum, irMax = irSum+s.instructions, max(irMax, s.instructions)
	}
	k := float64(len(r.primaries))
	if irSum > 0 {
		irMaxMean = float64(irMax) / (float64(irSum) / k)
	}
	return float64(cmdMax) / (float64(cmdSum) / k), float64(cpuMax) / (float64(cpuSum) / k),
		irMaxMean, us(cpuMax) / float64(r.sections)
}

// reportSpread reports cmds-max/mean, cpu-max/mean, busiest-cpu-us/section and, under
// callgrind, Ir-max/mean (see spread).
func (r rowResult) reportSpread(b *testing.B) {
	if r.sections == 0 {
		return
	}
	cmds, cpu, ir, busiest := r.spread()
	b.ReportMetric(cmds, "cmds-max/mean")
	b.ReportMetric(cpu, "cpu-max/mean")
	b.ReportMetric(busiest, "busiest-cpu-us/section")
	if ir > 0 {
		b.ReportMetric(ir, "Ir-max/mean")
	}
}

// reportHot reports hold-ms, the mean hold of all sections; max-wait-held-ms, how much of
// the longest wait others held the waiter's resource (rowResult.worstHeld: the part of it
// that no first-come, first-served lock can shorten); and for r0, the most wanted resource:
// r0-interval-ms, the mean time from the start of one of its sections to the start of the
// next, and r0-gap-ms, the median time from the end of one to the start of the next (the
// hand-over, when someone was waiting). With first-come, first-served waiting and every
// goroutine queued on r0, the longest wait is about the number of goroutines times
// r0-interval-ms.
func (r rowResult) reportHot(b *testing.B) {
	if r.sections == 0 {
		return
	}
	b.ReportMetric(ms(r.hold), "hold-ms")
	b.ReportMetric(ms(r.worstHeld), "max-wait-held-ms")
	if len(r.hot) < 2 {
		return
	}
	gaps := make([]time.Duration, 0, len(r.hot)-1)
	for i := 1; i < len(r.hot); i++ {
		gaps = append(gaps, r.hot[i].start.Sub(r.hot[i-1].end))
	}
	slices.Sort(gaps)
	b.ReportMetric(ms(r.hot[len(r.hot)-1].start.Sub(r.hot[0].start))/float64(len(r.hot)-1), "r0-interval-ms")
	b.ReportMetric(ms(gaps[len(gaps)/2]), "r0-gap-ms")
}

// idlePerSection returns the CPU, in µs, and the instructions that the primaries would have
// used with no traffic (r.idle) over the spans of their readings for the row, per section:
// the part of cpu-us/section and server-Ir/section that is the servers' own background
// work.
func (r rowResult) idlePerSection() (cpuUS, ir float64) {
	if len(r.idle) != len(r.primaries) {
		return 0, 0
	}
	var cpu time.Duration
	var n float64
	for i, p := range r.primaries {
		share := p.span.Seconds() / r.idle[i].span.Seconds()
		_, idleCPU := r.idle[i].work()
		cpu += time.Duration(float64(idleCPU) * share)
		n += float64(r.idle[i].instructions) * share
	}
	return us(cpu) / float64(r.sections), n / float64(r.sections)
}

// reportIdle reports idle-cpu-us/section and, under callgrind, idle-Ir/section (see
// idlePerSection).
func (r rowResult) reportIdle(b *testing.B) {
	if r.sections == 0 {
		return
	}
	cpu, ir := r.idlePerSection()
	b.ReportMetric(cpu, "idle-cpu-us/section")
	if ir > 0 {
		b.ReportMetric(ir, "idle-Ir/section")
	}
}

// reportSwitches reports the primaries' wakeups/section and preemptions/section (see
// serverStats), when they could be read: on a cluster the benchmark started.
func (r rowResult) reportSwitches(b *testing.B) {
	var wakeups, preemptions int64
	for _, s := range r.primaries {
		wakeups, preemptions = wakeups+s.wakeups, preemptions+s.preemptions
	}
	if r.sections == 0 || wakeups == 0 {
		return
	}
	b.ReportMetric(float64(wakeups)/float64(r.sections), "wakeups/section")
	b.ReportMetric(float64(preemptions)/float64(r.sections), "preemptions/section")
}

// reportLoad reports the rate a paced row offered (offered/s, to compare with sections/s)
// and the CPU the mean primary used, in percent of one core (core-%/primary).
func (r rowResult) reportLoad(b *testing.B, offered float64) {
	_, cpu := r.work()
	b.ReportMetric(offered, "offered/s")
	b.ReportMetric(100*cpu.Seconds()/r.elapsed.Seconds()/float64(len(r.primaries)), "core-%/primary")
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

func TestWorstHeldOf(t *testing.T) {
	at := func(ms int) time.Time { return time.Unix(0, 0).Add(time.Duration(ms) * time.Millisecond) }
	hold := func(resource, asked, start, end int) section {
		return section{resource: resource, asked: at(asked), span: span{at(start), at(end)}}
	}
	sections := []section{
		hold(0, -3, -2, 1),  // held r0 for the first 1 ms of the longest wait
		hold(0, -1, 2, 4),   // 2 ms, all inside it
		hold(1, 0, 0, 10),   // another resource: not counted
		hold(0, 0, 10, 11),  // the longest wait: 10 ms, from 0 to 10
		hold(0, 1, 9, 12),   // 1 ms of it (a hold it overlaps: no lock allows that, but count it)
		hold(0, 11, 12, 13), // after it
	}
	if got, want := worstHeldOf(sections), 4*time.Millisecond; got != want {
		t.Errorf("worstHeldOf = %v, want %v", got, want)
	}
	if got := worstHeldOf(nil); got != 0 {
		t.Errorf("worstHeldOf(nil) = %v, want 0", got)
	}
}
