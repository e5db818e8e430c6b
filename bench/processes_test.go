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

	"github.com/redis/go-redis/v9"
)

const (
	// holdTime is how long every critical section sleeps while holding the lock.
	holdTime = time.Millisecond
	// waitLimit bounds each row's run, every wait for the lock included.
	waitLimit = 5 * time.Minute
)

// rows are the setups every family runs, in order. goroutines is per process.
var rows = []struct {
	contender             contender
	processes, goroutines int
}{
	{fencekitAcquire, 1, 8},
	{fencekitAcquire, 2, 4},
	{fencekitAcquire, 2, 1},
	{fencekitAcquire, 8, 1},
	{fencekitAcquire, 16, 1},
	{fencekitAcquire, 32, 1},
	{fencekitDo, 1, 8},
	{fencekitDo, 8, 1},
	{bsmRedislock, 8, 1},
	{redsyncMutex, 8, 1},
}

// BenchmarkProcesses measures contention on one resource across processes: goroutines
// take the lock, sleep 1 ms (holdTime) while holding it and release it, b.N critical
// sections in all. Each process is a client of its own, and for fencekit a Locker of its
// own. The rows run fencekit at 1 and 2 processes of 8 goroutines in all, and at 2, 8, 16
// and 32 processes of one goroutine each; fencekit's Locker.Do at 1 and 8; and, at 8
// processes, bsm/redislock and redsync, each retrying every 1 ms.
//
// The "standalone" family runs against the Redis named by FENCING_REDIS_ADDR, which must be
// private and otherwise idle (its INFO stats are read); the "cluster" family against a
// local three-primary Redis Cluster that it starts. Each row reports:
//
//   - of-ideal: critical sections per second as a fraction of the ideal, the lock held back
//     to back for the hold actually taken (hold-ms; a 1 ms sleep lasts longer on a VM);
//   - p50-wait-ms, p99-wait-ms, max-wait-ms: how long a goroutine waited for the lock;
//   - least-share: the sections of the least-served process over an even share;
//   - cmds/section: commands the Redis primaries processed per section (INFO stats
//     total_commands_processed; commands inside scripts count);
//   - gap-ms: the median hand-off, from the end of one section's hold to the start of the
//     next one's;
//   - ping-ms, pub-ms: the row's floors, measured with its own clients just before its
//     sections: the median PING round trip sent after a 1 ms sleep, and the median time
//     from sending a PUBLISH after a 1 ms sleep to another client's receiving it;
//   - handoff-ms: a third floor, measured likewise: the median round trip of the least a
//     fenced queue's hand-off does in Redis, as a bare script sent after a 1 ms sleep
//     (handoffScript: check the holder, take the next waiter, move the counter, set the
//     lock, record the release for a retried call: five commands, no branches);
//   - gap/ping, gap/pub, gap/handoff: gap-ms over each floor;
//   - script-ms/section: the time the Redis primaries spent running scripts (EVALSHA and
//     EVAL, INFO commandstats; the commands inside them included), per section: the part of
//     a hand-off that is the server's own work, which neither floor has.
//
// See README.md for the commands.
func BenchmarkProcesses(b *testing.B) {
	b.Run("standalone", func(b *testing.B) { runRows(b, standalone(b)) })
	b.Run("cluster", func(b *testing.B) { runRows(b, cluster(b)) })
}

// runRows runs every row against t.
func runRows(b *testing.B, t *target) {
	for _, r := range rows {
		name := fmt.Sprintf("%s/processes=%d", r.contender.name, r.processes)
		if r.processes*r.goroutines < 8 {
			name += fmt.Sprintf("x%d", r.goroutines) // fewer workers than the other rows
		}
		b.Run(name, func(b *testing.B) {
			contend(b, t, r.contender, r.processes, r.goroutines)
		})
	}
}

// resourceSeq numbers the resources, one per run of a row.
var resourceSeq atomic.Int64

// contend runs b.N critical sections on one resource of t, from processes processes of
// goroutines goroutines each, and reports the row's figures.
func contend(b *testing.B, t *target, c contender, processes, goroutines int) {
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	resource := "r" + strconv.FormatInt(resourceSeq.Add(1), 10)
	procs := make([]process, processes)
	for i := range procs {
		client := t.newClient(nil)
		defer client.Close()
		// Connect (and, on a cluster, load the slots) before the commands are counted.
		if err := client.Ping(ctx).Err(); err != nil {
			b.Fatalf("ping: %v", err)
		}
		procs[i] = c.newProcess(client, t.prefix)
		defer procs[i].close()
	}

	ping, pub, script := floors(b, ctx, t, resource)

	workers := processes * goroutines
	waits := make([][]time.Duration, workers) // one wait per section, per worker
	spans := make([][]span, workers)          // one hold per section, per worker
	var done, held atomic.Int64               // sections started; total hold, ns
	var inside atomic.Int32                   // holders right now
	commands := t.commandCounter(b)
	scripts := scriptTime(b, t)
	b.ResetTimer()
	begin := time.Now()
	var wg sync.WaitGroup
	for w := range workers {
		p := procs[w/goroutines]
		wg.Go(func() {
			for done.Add(1) <= int64(b.N) {
				t0 := time.Now()
				err := p.section(ctx, resource, func() {
					waits[w] = append(waits[w], time.Since(t0))
					if inside.Add(1) != 1 {
						b.Error("two holders at once")
					}
					h0 := time.Now()
					time.Sleep(holdTime)
					h1 := time.Now()
					held.Add(int64(h1.Sub(h0)))
					spans[w] = append(spans[w], span{h0, h1})
					inside.Add(-1)
				})
				if err != nil {
					b.Errorf("%s: %v", c.name, err)
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

	served := make([]int, processes)
	for w, ws := range waits {
		served[w/goroutines] += len(ws)
	}
	reportRow(b, rowFigures{
		waits: slices.Concat(waits...), spans: slices.Concat(spans...), served: served,
		elapsed: elapsed, held: time.Duration(held.Load()), cmds: cmds, scriptUsec: scriptUsec,
		ping: ping, pub: pub, handoff: script,
	})
}

// rowFigures is what one row of sections on one resource measured, for reportRow.
type rowFigures struct {
	waits              []time.Duration // how long each section waited for the lock
	spans              []span          // each section's hold
	served             []int           // the sections of each process
	elapsed            time.Duration   // from the first section's start to the last one's end
	held               time.Duration   // the holds' total
	cmds, scriptUsec   int64           // the primaries' commands and time in scripts
	ping, pub, handoff time.Duration   // the row's floors (see floors)
}

// reportRow reports a row's figures (see BenchmarkProcesses).
func reportRow(b *testing.B, f rowFigures) {
	all := f.waits
	if len(all) == 0 {
		return
	}
	slices.Sort(all)
	n := float64(len(all))
	meanHold := f.held / time.Duration(len(all))
	ideal := 1 / meanHold.Seconds() // sections per second with the lock held back to back
	b.ReportMetric(n/f.elapsed.Seconds()/ideal, "of-ideal")
	b.ReportMetric(ms(all[len(all)/2]), "p50-wait-ms")
	b.ReportMetric(ms(all[len(all)*99/100]), "p99-wait-ms")
	b.ReportMetric(ms(all[len(all)-1]), "max-wait-ms")
	b.ReportMetric(float64(slices.Min(f.served))/(n/float64(len(f.served))), "least-share")
	b.ReportMetric(float64(f.cmds)/n, "cmds/section")
	b.ReportMetric(ms(meanHold), "hold-ms")
	gap := slotGap(f.spans, 1) // one holder at a time: from the end of a hold to the next start
	b.ReportMetric(ms(gap), "gap-ms")
	b.ReportMetric(ms(f.ping), "ping-ms")
	b.ReportMetric(ms(f.pub), "pub-ms")
	b.ReportMetric(float64(gap)/float64(f.ping), "gap/ping")
	b.ReportMetric(float64(gap)/float64(f.pub), "gap/pub")
	b.ReportMetric(float64(f.scriptUsec)/1000/n, "script-ms/section")
	b.ReportMetric(ms(f.handoff), "handoff-ms")
	b.ReportMetric(float64(gap)/float64(f.handoff), "gap/handoff")
}

// floorSamples is how many times floors measures each floor.
const floorSamples = 200

// handoffScript is the least work a hand-off of a fenced lock to the next queued waiter
// does in Redis, whoever implements it, as one script of five commands: read the lock to
// check its holder, pop the next waiter, move the fencing counter, set the lock to the
// waiter with its lease, and record the release for a retried call. KEYS: the lock, the
// queue, the counter and the record.
var handoffScript = redis.NewScript(`local held = redis.call('GET', KEYS[1])
local next = redis.call('LPOP', KEYS[2])
local token = redis.call('INCR', KEYS[3])
redis.call('SET', KEYS[1], next .. ':' .. token .. '+', 'PX', 3000)
redis.call('SET', KEYS[4], '2:' .. next .. ':' .. token, 'PX', 10000)
return {2, next, token}`)

// floors measures a row's three floors on t with fresh clients, before its sections are
// counted: the median PING round trip after a 1 ms sleep; the median time from sending a
// PUBLISH after a 1 ms sleep to another client's receiving it (on channel, named after the
// row's resource so that on a cluster it has the resource's slot); and the median round
// trip of handoffScript after a 1 ms sleep, on keys of the resource's slot, with a waiter
// queued before each sleep.
func floors(b *testing.B, ctx context.Context, t *target, resource string) (ping, pub, handoff time.Duration) {
	sender, receiver := t.newClient(nil), t.newClient(nil)
	defer sender.Close()
	defer receiver.Close()
	if err := sender.Ping(ctx).Err(); err != nil {
		b.Fatalf("ping: %v", err)
	}
	pings := make([]time.Duration, floorSamples)
	for i := range pings {
		time.Sleep(time.Millisecond)
		t0 := time.Now()
		if err := sender.Ping(ctx).Err(); err != nil {
			b.Fatalf("ping: %v", err)
		}
		pings[i] = time.Since(t0)
	}
	channel := t.prefix + "floor:{" + resource + "}"
	sub := receiver.Subscribe(ctx, channel)
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil { // the subscription's confirmation
		b.Fatalf("subscribe: %v", err)
	}
	received := make(chan time.Time)
	go func() {
		defer close(received)
		for {
			if _, err := sub.ReceiveMessage(ctx); err != nil {
				return
			}
			received <- time.Now()
		}
	}()
	pubs := make([]time.Duration, floorSamples)
	for i := range pubs {
		time.Sleep(time.Millisecond)
		t0 := time.Now()
		if err := sender.Publish(ctx, channel, "x").Err(); err != nil {
			b.Fatalf("publish: %v", err)
		}
		pubs[i] = (<-received).Sub(t0)
	}
	_ = sub.Close()
	for range received {
	}
	tag := t.prefix + "floor:{" + resource + "}:"
	keys := []string{tag + "lock", tag + "queue", tag + "fence", tag + "record"}
	defer sender.Del(context.WithoutCancel(ctx), keys[1], keys[2], keys[3], keys[0]) // one slot
	if err := handoffScript.Load(ctx, sender).Err(); err != nil {
		b.Fatalf("SCRIPT LOAD: %v", err)
	}
	handoffs := make([]time.Duration, floorSamples)
	for i := range handoffs {
		if err := sender.RPush(ctx, keys[1], "waiter."+strconv.Itoa(i)+".3000").Err(); err != nil {
			b.Fatalf("RPUSH: %v", err)
		}
		time.Sleep(time.Millisecond)
		t0 := time.Now()
		if err := handoffScript.Run(ctx, sender, keys).Err(); err != nil { // EVAL after a SCRIPT FLUSH by another test
			b.Fatalf("hand-off script: %v", err)
		}
		handoffs[i] = time.Since(t0)
	}
	slices.Sort(pings)
	slices.Sort(pubs)
	slices.Sort(handoffs)
	return pings[len(pings)/2], pubs[len(pubs)/2], handoffs[len(handoffs)/2]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
