// Command robfigcron runs a job every second in three replicas of a robfig/cron v3 scheduler,
// each with a leader.Elector of its own: cronfence.Schedule runs the job only on the replica
// that leads, with the leader's epoch and the run's tick in the job's context, and the job
// writes to a fenced store with the epoch. After a few ticks the leader's elector stops, as in a rolling deploy; the next
// replica leads at once with a higher epoch. Then the first leader, told nothing, writes late
// with its old epoch, and the store refuses it.
//
//	go run ./examples/robfigcron                             # embedded miniredis
//	REDIS_ADDR=127.0.0.1:6379 go run ./examples/robfigcron   # or redis://host:port/db
//
// It prints what each replica did and exits 0 when every tick ran once and no stale write was
// accepted, 1 otherwise. Its Redis keys are unique to the run and removed at the end.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/robfig/cron/v3"

	"github.com/fencekit/fencekit/cronfence"
	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/leader"
	"github.com/fencekit/fencekit/store"
)

func main() {
	var nonce [4]byte
	_, _ = rand.Read(nonce[:])
	prefix := "robfigcron-example:" + hex.EncodeToString(nonce[:]) + ":"
	os.Exit(run(context.Background(), os.Stdout, os.Getenv("REDIS_ADDR"), prefix))
}

// waitLimit bounds every wait of the program.
const waitLimit = 30 * time.Second

// run runs the demonstration against the Redis at addr (empty: an embedded miniredis), with
// its keys under prefix, and returns the exit code.
func run(ctx context.Context, out io.Writer, addr, prefix string) int {
	d, err := setup(addr, prefix)
	if err != nil {
		fmt.Fprintln(out, "robfigcron:", err)
		return 1
	}
	defer d.close()
	if err := d.run(ctx, out); err != nil {
		fmt.Fprintln(out, "FAIL:", err)
		return 1
	}
	fmt.Fprintln(out, "OK")
	return 0
}

// demo is one run's Redis, replicas and store.
type demo struct {
	where    string
	mini     *miniredis.Miniredis
	rdb      *redis.Client
	prefix   string // fencing key prefix, unique to the run
	replicas []*replica
	ledger   store.Memory // the fenced store: refuses an epoch below the highest it has seen

	mu   sync.Mutex
	runs []jobRun
}

// jobRun is one run of the job.
type jobRun struct {
	replica int
	tick    time.Time
	epoch   int64
}

// replica is what each process of the service runs: a Locker, an Elector, a Cron.
type replica struct {
	n       int
	locker  *fencing.Locker
	elector *leader.Elector
	cron    *cron.Cron
	skipped atomic.Int64       // runs skipped: not leader
	stop    context.CancelFunc // ends the elector's Run, as the process's shutdown would
	done    chan error         // Run's result
}

func setup(addr, prefix string) (*demo, error) {
	d := &demo{prefix: prefix}
	var ro *redis.Options
	switch {
	case addr == "":
		m, err := miniredis.Run()
		if err != nil {
			return nil, err
		}
		d.mini, d.where = m, "embedded miniredis"
		ro = &redis.Options{Addr: m.Addr()}
	case strings.Contains(addr, "://"):
		o, err := redis.ParseURL(addr)
		if err != nil {
			return nil, err
		}
		ro, d.where = o, fmt.Sprintf("Redis at %s, db %d", o.Addr, o.DB)
	default:
		ro, d.where = &redis.Options{Addr: addr}, "Redis at "+addr
	}
	ro.DisableIdentity = true
	d.rdb = redis.NewClient(ro)
	if err := d.rdb.Ping(context.Background()).Err(); err != nil {
		d.close()
		return nil, fmt.Errorf("%s: %w", d.where, err)
	}
	return d, nil
}

// start starts replica n: its elector campaigns, and its Cron runs the job every second,
// which cronfence.Schedule lets through only while the elector leads.
func (d *demo) start(n int) (*replica, error) {
	rp := &replica{n: n, done: make(chan error, 1)}
	// Each replica has its own Locker, as it would in its own process. The lease bounds how
	// long the ticks wait for a successor when a leader dies; a leader that shuts down
	// resigns, and the next one leads at once.
	rp.locker = fencing.New(d.rdb, fencing.WithPrefix(d.prefix), fencing.WithTTL(5*time.Second))
	ctx, stop := context.WithCancel(context.Background())
	rp.stop = stop
	// Every second, on the second: every replica's Cron fires for the same ticks.
	rp.cron = cron.New(cron.WithSeconds(), cron.WithLocation(time.UTC))

	// The wiring: an elector, its campaign, and the job, which runs only while it leads (the
	// skip handler counts the other replicas' runs, as a metric would).
	rp.elector = leader.New(rp.locker, "settlement")
	go func() { rp.done <- rp.elector.Run(ctx) }()
	_, err := cronfence.Schedule(rp.cron, "* * * * * *", rp.elector, d.settle(n), cronfence.WithSkipHandler(rp.skip))
	if err != nil {
		rp.close()
		return nil, err
	}
	rp.cron.Start()
	return rp, nil
}

// settle returns replica n's job: it writes the run of its tick with the leader's epoch.
func (d *demo) settle(n int) func(ctx context.Context) {
	return func(ctx context.Context) {
		epoch, _ := fencing.TokenFromContext(ctx) // the leader's epoch
		tick, _ := cronfence.TickFromContext(ctx) // the second the run was scheduled for
		// The write carries the epoch: a leader replaced without knowing it cannot overwrite
		// its successor's work.
		_ = d.ledger.Write("settlement", epoch, func() error {
			d.mu.Lock()
			d.runs = append(d.runs, jobRun{replica: n, tick: tick, epoch: epoch})
			d.mu.Unlock()
			return nil
		})
	}
}

// skip counts a run skipped because the replica does not lead.
func (rp *replica) skip(err error) {
	if errors.Is(err, leader.ErrNotLeader) {
		rp.skipped.Add(1)
	}
}

// stopCron stops the replica's Cron and waits for a run in progress.
func (rp *replica) stopCron() {
	if rp.cron != nil {
		<-rp.cron.Stop().Done()
		rp.cron = nil
	}
}

// stopElector ends the elector's Run, which resigns.
func (rp *replica) stopElector() {
	if rp.stop != nil {
		rp.stop()
		<-rp.done
		rp.stop = nil
	}
}

// close stops the replica: the Cron first, then the elector, then the Locker.
func (rp *replica) close() {
	rp.stopCron()
	rp.stopElector()
	_ = rp.locker.Close()
}

func (d *demo) close() {
	for _, rp := range d.replicas {
		rp.close()
	}
	if d.mini == nil && d.rdb != nil {
		// A throwaway program removes what it created; a real service keeps its counters.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		iter := d.rdb.Scan(ctx, 0, d.prefix+"*", 500).Iterator()
		for iter.Next(ctx) {
			d.rdb.Del(ctx, iter.Val())
		}
		cancel()
	}
	if d.rdb != nil {
		_ = d.rdb.Close()
	}
	if d.mini != nil {
		d.mini.Close()
	}
}

// runsSnapshot returns the job's runs so far.
func (d *demo) runsSnapshot() []jobRun {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.runs)
}

// leader returns the replica that leads, and its epoch, or nil.
func (d *demo) leader() (*replica, int64) {
	for _, rp := range d.replicas {
		if rp.stop == nil {
			continue
		}
		if epoch, ok := rp.elector.Token(); ok {
			return rp, epoch
		}
	}
	return nil, 0
}

func (d *demo) run(ctx context.Context, out io.Writer) error {
	fmt.Fprintf(out, "robfigcron: 3 replicas of a robfig/cron v3 scheduler with cronfence.Schedule, a job every second (%s)\n", d.where)
	for n := 1; n <= 3; n++ {
		rp, err := d.start(n)
		if err != nil {
			return err
		}
		d.replicas = append(d.replicas, rp)
	}
	var first *replica
	var epoch int64
	if err := waitFor(ctx, func() bool { first, epoch = d.leader(); return first != nil }); err != nil {
		return fmt.Errorf("no replica leads: %w", err)
	}
	fmt.Fprintf(out, "replica %d leads (epoch %d)\n", first.n, epoch)
	// Two runs by the first leader.
	if err := waitFor(ctx, func() bool { return len(d.runsSnapshot()) >= 2 }); err != nil {
		return fmt.Errorf("the job did not run: %w", err)
	}
	// A rolling deploy: the leader's elector stops (Run resigns) in the middle of a second.
	// The replicas' timers fire for a tick within a few milliseconds of each other, and a
	// change of leader between two of them could let both run that tick: leadership is one
	// leader at a time, not one run per tick. The fenced write keeps an older epoch out.
	runs := d.runsSnapshot()
	mid := runs[len(runs)-1].tick.Add(1500 * time.Millisecond)
	select {
	case <-time.After(time.Until(mid)):
	case <-ctx.Done():
		return ctx.Err()
	}
	stopped := time.Now()
	first.stopElector()
	var next *replica
	var nextEpoch int64
	if err := waitFor(ctx, func() bool { next, nextEpoch = d.leader(); return next != nil }); err != nil {
		return fmt.Errorf("no replica took over: %w", err)
	}
	fmt.Fprintf(out, "replica %d's elector stopped; replica %d leads (epoch %d) %v later\n",
		first.n, next.n, nextEpoch, time.Since(stopped).Round(time.Millisecond))
	// Two runs by the next leader.
	if err := waitFor(ctx, func() bool {
		return len(slices.DeleteFunc(d.runsSnapshot(), func(r jobRun) bool { return r.replica != next.n })) >= 2
	}); err != nil {
		return fmt.Errorf("the next leader did not run the job: %w", err)
	}
	for _, rp := range d.replicas {
		rp.stopCron()
	}

	// The first leader, paused or partitioned and told nothing, writes late with its epoch.
	var problems []string
	stale := 0
	err := d.ledger.Write("settlement", epoch, func() error { stale++; return nil })
	var refused *store.StaleTokenError
	switch {
	case errors.As(err, &refused):
		fmt.Fprintf(out, "replica %d writes late with epoch %d: refused (%v)\n", first.n, epoch, err)
	case err == nil:
		fmt.Fprintf(out, "replica %d writes late with epoch %d: ACCEPTED, a stale write\n", first.n, epoch)
	default:
		return err
	}

	// Each tick from the first run to the last ran once, by the leader of its time.
	runs = d.runsSnapshot()
	perTick := map[time.Time][]jobRun{}
	for _, r := range runs {
		perTick[r.tick] = append(perTick[r.tick], r)
	}
	firstTick, lastTick := runs[0].tick, runs[len(runs)-1].tick
	for tick := firstTick; !tick.After(lastTick); tick = tick.Add(time.Second) {
		rs := perTick[tick]
		switch len(rs) {
		case 0:
			fmt.Fprintf(out, "   tick %s: not run\n", tick.Format(time.TimeOnly))
			problems = append(problems, "tick "+tick.Format(time.TimeOnly)+" not run")
		case 1:
			fmt.Fprintf(out, "   tick %s: run by replica %d with epoch %d\n", tick.Format(time.TimeOnly), rs[0].replica, rs[0].epoch)
		default:
			fmt.Fprintf(out, "   tick %s: run %d times\n", tick.Format(time.TimeOnly), len(rs))
			problems = append(problems, fmt.Sprintf("tick %s run %d times", tick.Format(time.TimeOnly), len(rs)))
		}
	}
	for _, rp := range d.replicas {
		fmt.Fprintf(out, "replica %d skipped %d runs: not leader\n", rp.n, rp.skipped.Load())
	}
	ticks := int(lastTick.Sub(firstTick)/time.Second) + 1
	fmt.Fprintf(out, "%d ticks, %d runs: each tick ran once: %v\n", ticks, len(runs), len(problems) == 0)
	fmt.Fprintf(out, "stale writes accepted: %d\n", stale)
	if stale > 0 {
		problems = append(problems, "a stale write was accepted")
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}

// waitFor polls cond until it holds, for at most waitLimit.
func waitFor(ctx context.Context, cond func() bool) error {
	ctx, cancel := context.WithTimeout(ctx, waitLimit)
	defer cancel()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-tick.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}
