package bench_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencekit/fencekit/fencing"
)

// benchLimit is the limit of BenchmarkLimit's resource.
const benchLimit = 4

// BenchmarkLimit measures one resource of limit 4 (fencing.WithLimit) under contention: 8
// processes (each a client and a Locker of its own) of 8 goroutines take a slot with Acquire,
// sleep 1 ms (holdTime) and release it, b.N sections in all. A counter checks that no more
// than 4 goroutines are inside at any instant (over-limit counts the instants that broke
// it: an error). The "standalone" family runs on the Redis of FENCING_REDIS_ADDR (private
// and idle: its INFO stats are read), "cluster" on a local three-primary Cluster. Each row
// reports:
//
//   - of-ideal: sections per second over 4 times the ideal of one lock, which is the hold
//     actually taken (hold-ms) back to back;
//
//   - most-inside: the most holders seen at once (4 when the slots are used);
//
//   - cmds/section: commands the primaries processed per section (scripts' inner commands
//     count);
//
//   - p50-wait-ms, p99-wait-ms, max-wait-ms: how long a goroutine waited for its slot;
//
//   - gap-ms: the median time a slot stood free between two holds (slotGap), and the
//     row's floors measured before its sections as BenchmarkProcesses measures them:
//     ping-ms, pub-ms, handoff-ms, and gap/handoff;
//
//   - script-ms/section: the primaries' time in scripts per section (as BenchmarkProcesses).
//
// The limit=1 row runs the same workers on the exclusive lock, for a reference taken in the
// same run (its of-ideal is over 1 times the ideal): on a loaded machine both fall.
//
//	cd bench && FENCING_REDIS_ADDR=127.0.0.1:6390 go test -run '^$' -bench Limit -benchtime 4000x -count 3 .
func BenchmarkLimit(b *testing.B) {
	for _, family := range []struct {
		name   string
		target func(*testing.B) *target
	}{{"standalone", standalone}, {"cluster", cluster}} {
		b.Run(family.name, func(b *testing.B) {
			t := family.target(b)
			for _, limit := range []int{benchLimit, 1} {
				b.Run(fmt.Sprintf("limit=%d", limit), func(b *testing.B) { limitRow(b, t, 8, 8, limit) })
			}
		})
	}
}

// limitRow runs b.N sections of one resource of limit on t from processes × goroutines.
func limitRow(b *testing.B, t *target, processes, goroutines, limit int) {
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	resource := "l" + strconv.FormatInt(resourceSeq.Add(1), 10)
	lockers := make([]*fencing.Locker, processes)
	for i := range lockers {
		client := t.newClient(nil)
		defer client.Close()
		if err := client.Ping(ctx).Err(); err != nil {
			b.Fatalf("ping: %v", err)
		}
		lockers[i] = fencing.New(client, fencing.WithPrefix(t.prefix), fencing.WithLimit(limit))
		defer lockers[i].Close()
	}
	ping, pub, handoff := floors(b, ctx, t, resource)
	workers := processes * goroutines
	waits := make([][]time.Duration, workers)
	spans := make([][]span, workers) // one hold per section, per worker
	var done, held atomic.Int64
	var inside, most, over atomic.Int32
	commands := t.commandCounter(b)
	scripts := scriptTime(b, t)
	b.ResetTimer()
	begin := time.Now()
	var wg sync.WaitGroup
	for w := range workers {
		l := lockers[w/goroutines]
		wg.Go(func() {
			for done.Add(1) <= int64(b.N) {
				t0 := time.Now()
				lock, err := l.Acquire(ctx, resource)
				if err != nil {
					b.Errorf("Acquire: %v", err)
					return
				}
				waits[w] = append(waits[w], time.Since(t0))
				n := inside.Add(1)
				if n > int32(limit) {
					over.Add(1)
				}
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				h0 := time.Now()
				time.Sleep(holdTime)
				h1 := time.Now()
				held.Add(int64(h1.Sub(h0)))
				spans[w] = append(spans[w], span{h0, h1})
				inside.Add(-1)
				if err := lock.Release(ctx); err != nil {
					b.Errorf("Release: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(begin)
	b.StopTimer()
	cmds := commands()
	_, scriptUsec := scripts()
	if n := over.Load(); n > 0 {
		b.Errorf("%d sections began with more than %d holders inside", n, limit)
	}
	all := slices.Concat(waits...)
	if len(all) == 0 {
		return
	}
	slices.Sort(all)
	n := float64(len(all))
	meanHold := time.Duration(held.Load() / int64(len(all)))
	ideal := float64(limit) / meanHold.Seconds()
	b.ReportMetric(n/elapsed.Seconds()/ideal, "of-ideal")
	b.ReportMetric(float64(most.Load()), "most-inside")
	b.ReportMetric(float64(over.Load()), "over-limit")
	b.ReportMetric(float64(cmds)/n, "cmds/section")
	b.ReportMetric(ms(all[len(all)/2]), "p50-wait-ms")
	b.ReportMetric(ms(all[len(all)*99/100]), "p99-wait-ms")
	b.ReportMetric(ms(all[len(all)-1]), "max-wait-ms")
	b.ReportMetric(ms(meanHold), "hold-ms")
	gap := slotGap(slices.Concat(spans...), limit)
	b.ReportMetric(ms(gap), "gap-ms")
	b.ReportMetric(ms(ping), "ping-ms")
	b.ReportMetric(ms(pub), "pub-ms")
	b.ReportMetric(ms(handoff), "handoff-ms")
	b.ReportMetric(float64(gap)/float64(handoff), "gap/handoff")
	b.ReportMetric(float64(scriptUsec)/1000/n, "script-ms/section")
}

// slotGap returns the median time a slot stood free: with the slots all in use, the k-th
// hold to end frees the slot that the (k+limit)-th hold to start takes.
func slotGap(holds []span, limit int) time.Duration {
	starts := make([]time.Time, len(holds))
	ends := make([]time.Time, len(holds))
	for i, h := range holds {
		starts[i], ends[i] = h.start, h.end
	}
	slices.SortFunc(starts, time.Time.Compare)
	slices.SortFunc(ends, time.Time.Compare)
	var gaps []time.Duration
	for k := 0; k+limit < len(starts); k++ {
		gaps = append(gaps, starts[k+limit].Sub(ends[k]))
	}
	if len(gaps) == 0 {
		return 0
	}
	slices.Sort(gaps)
	return gaps[len(gaps)/2]
}

// TestSlotGap checks slotGap on holds of two slots whose every slot stands free for 3 ms.
func TestSlotGap(t *testing.T) {
	at := func(ms int) time.Time { return time.Unix(0, 0).Add(time.Duration(ms) * time.Millisecond) }
	holds := []span{
		{at(0), at(10)}, {at(1), at(11)}, // the two slots taken
		{at(13), at(20)}, {at(14), at(21)}, // each 3 ms after one ended
		{at(23), at(30)}, {at(24), at(31)},
	}
	if got := slotGap(holds, 2); got != 3*time.Millisecond {
		t.Errorf("slotGap: %v, want 3ms", got)
	}
	if got := slotGap(holds[:2], 2); got != 0 {
		t.Errorf("slotGap of holds that never waited for a slot: %v, want 0", got)
	}
}
