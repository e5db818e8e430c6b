package bench_test

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/fencing"
)

// sharedReaders is how many reader processes the shared rows run.
const sharedReaders = 8

// writerEvery is how often the mixed row's writer takes the resource.
const writerEvery = 10 * time.Millisecond

// BenchmarkShared measures the shared mode (fencing.Shared) on one resource of the Redis named
// by FENCING_REDIS_ADDR (private and otherwise idle: its INFO stats are read), every process
// a client and a Locker of its own, every section a 1 ms sleep (holdTime), b.N reader
// sections a row:
//
//   - "uncontended": one process, TryAcquire shared and Release, back to back: cmds/section
//     is the Redis commands of an uncontended shared section (INFO stats
//     total_commands_processed, the commands inside scripts included);
//   - "floor": sharedReaders processes, each sending a PING, sleeping 1 ms and sending another
//     PING, again and again: the two round trips every reader's section makes at least (its
//     acquisition and its release), with nothing locked; of-ideal as below;
//   - "readers": sharedReaders processes, each taking the resource shared (Acquire) and
//     holding it 1 ms, again and again; of-ideal is their sections per second over
//     sharedReaders times the ideal of one (one section per hold actually taken), of-floor
//     their sections per second over the floor row's cycles per second;
//   - "mixed": the same readers, and one writer process that takes the resource exclusively
//     every writerEvery and holds it 1 ms; writer-max-wait-ms and writer-p99-wait-ms are
//     how long the writer waited for it, of-readers the readers' sections per second over
//     the readers row's (run just before), cmds/section the commands per section of either
//     kind, and writer-overlaps the sections that overlapped the writer's (must be 0).
func BenchmarkShared(b *testing.B) {
	t := standalone(b)
	b.Run("uncontended", func(b *testing.B) {
		l := fencing.New(t.newClient(nil), fencing.WithPrefix(t.prefix))
		defer l.Close()
		ctx := context.Background()
		resource := "shared-u" + strconv.FormatInt(resourceSeq.Add(1), 10)
		commands := t.commandCounter(b)
		b.ResetTimer()
		for range b.N {
			lock, err := l.TryAcquire(ctx, resource, fencing.Shared())
			if err != nil {
				b.Fatal(err)
			}
			if err := lock.Release(ctx); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		b.ReportMetric(float64(commands())/float64(b.N), "cmds/section")
	})
	var floorRate, readersRate float64
	b.Run("floor", func(b *testing.B) {
		r := runShared(b, t, false, true)
		floorRate = r.readerRate
		b.ReportMetric(r.readerRate/(sharedReaders/r.meanHold.Seconds()), "of-ideal")
	})
	b.Run("readers", func(b *testing.B) {
		r := runShared(b, t, false, false)
		readersRate = r.readerRate
		b.ReportMetric(r.readerRate/(sharedReaders/r.meanHold.Seconds()), "of-ideal")
		if floorRate > 0 {
			b.ReportMetric(r.readerRate/floorRate, "of-floor")
		}
		b.ReportMetric(r.cmdsPerSection, "cmds/section")
		b.ReportMetric(float64(r.maxReaders), "max-readers")
		b.ReportMetric(r.scriptUsec, "script-us/call")
	})
	b.Run("mixed", func(b *testing.B) {
		r := runShared(b, t, true, false)
		if readersRate > 0 {
			b.ReportMetric(r.readerRate/readersRate, "of-readers")
		}
		b.ReportMetric(r.cmdsPerSection, "cmds/section")
		b.ReportMetric(r.scriptUsec, "script-us/call")
		if n := len(r.writerWaits); n > 0 {
			b.ReportMetric(ms(r.writerWaits[n-1]), "writer-max-wait-ms")
			b.ReportMetric(ms(r.writerWaits[n*99/100]), "writer-p99-wait-ms")
			b.ReportMetric(ms(r.writerWaits[n/2]), "writer-p50-wait-ms")
			b.ReportMetric(float64(n), "writer-sections")
		}
		b.ReportMetric(float64(r.overlaps), "writer-overlaps")
	})
}

// sharedRun is what one shared row measured.
type sharedRun struct {
	readerRate     float64         // reader sections per second
	meanHold       time.Duration   // the readers' mean hold
	cmdsPerSection float64         // commands per section, readers' and writer's
	writerWaits    []time.Duration // sorted
	overlaps       int64           // sections that overlapped a writer's
	maxReaders     int32           // the most readers at once
	scriptUsec     float64         // the server's time per script call, in µs
}

// runShared runs b.N reader sections in sharedReaders processes, and with writer a writer
// process every writerEvery until they are done, on one new resource; with floor, every
// reader section is two PINGs around the hold instead of an acquisition and a release.
func runShared(b *testing.B, t *target, writer, floor bool) sharedRun {
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	resource := "shared-r" + strconv.FormatInt(resourceSeq.Add(1), 10)
	lockers := make([]*fencing.Locker, sharedReaders+1)
	clients := make([]redis.UniversalClient, sharedReaders+1)
	for i := range lockers {
		c := t.newClient(nil)
		defer c.Close()
		if err := c.Ping(ctx).Err(); err != nil {
			b.Fatal(err)
		}
		clients[i] = c
		lockers[i] = fencing.New(c, fencing.WithPrefix(t.prefix))
		defer lockers[i].Close()
	}
	var (
		done, held        atomic.Int64 // reader sections started; their total hold, ns
		readers, writers  atomic.Int32 // holders right now
		most              atomic.Int32
		overlaps, written atomic.Int64
		waitsMu           sync.Mutex
		writerWaits       []time.Duration
	)
	commands := t.commandCounter(b)
	scripts := scriptTime(b, t)
	stop := make(chan struct{})
	b.ResetTimer()
	begin := time.Now()
	var wg sync.WaitGroup
	for i := range sharedReaders {
		l, c := lockers[i], clients[i]
		wg.Go(func() {
			for floor && done.Add(1) <= int64(b.N) {
				if err := c.Ping(ctx).Err(); err != nil {
					b.Error(err)
					return
				}
				h0 := time.Now()
				time.Sleep(holdTime)
				held.Add(int64(time.Since(h0)))
				if err := c.Ping(ctx).Err(); err != nil {
					b.Error(err)
					return
				}
			}
			for !floor && done.Add(1) <= int64(b.N) {
				lock, err := l.Acquire(ctx, resource, fencing.Shared())
				if err != nil {
					b.Error(err)
					return
				}
				n := readers.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				if writers.Load() != 0 {
					overlaps.Add(1)
				}
				h0 := time.Now()
				time.Sleep(holdTime)
				held.Add(int64(time.Since(h0)))
				readers.Add(-1)
				if err := lock.Release(ctx); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	var writerDone sync.WaitGroup
	if writer {
		l := lockers[sharedReaders]
		writerDone.Go(func() {
			tick := time.NewTicker(writerEvery)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				t0 := time.Now()
				lock, err := l.Acquire(ctx, resource)
				if err != nil {
					b.Error(err)
					return
				}
				wait := time.Since(t0)
				if writers.Add(1) != 1 || readers.Load() != 0 {
					overlaps.Add(1)
				}
				time.Sleep(holdTime)
				writers.Add(-1)
				if err := lock.Release(ctx); err != nil {
					b.Error(err)
					return
				}
				written.Add(1)
				waitsMu.Lock()
				writerWaits = append(writerWaits, wait)
				waitsMu.Unlock()
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(begin)
	close(stop)
	writerDone.Wait()
	b.StopTimer()
	cmds := commands()
	calls, usec := scripts()
	sections := float64(b.N) + float64(written.Load())
	slices.Sort(writerWaits)
	return sharedRun{
		readerRate:     float64(b.N) / elapsed.Seconds(),
		meanHold:       time.Duration(held.Load() / int64(b.N)),
		cmdsPerSection: float64(cmds) / sections,
		writerWaits:    writerWaits,
		overlaps:       overlaps.Load(),
		maxReaders:     most.Load(),
		scriptUsec:     float64(usec) / float64(max(calls, 1)),
	}
}
