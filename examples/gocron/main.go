// Command gocron runs a job every second in three replicas of a gocron v2 scheduler, each
// with a leader.Elector of its own (gocron.WithDistributedElector): only the leader runs the
// job, and the job writes to a fenced store with the leader's epoch (Elector.Token). After a
// few ticks the leader's elector stops, as in a rolling deploy; the next replica leads at
// once with a higher epoch. Then the first leader, told nothing, writes late with its old
// epoch, and the store refuses it.
//
//	go run .                             # embedded miniredis
//	REDIS_ADDR=127.0.0.1:6379 go run .   # or redis://host:port/db
//
// It prints what each replica did and exits 0 when every tick ran once and no stale write was
// accepted, 1 otherwise.
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
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/go-co-op/gocron/v2"
	"github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/leader"
	"github.com/fencekit/fencekit/store"
)

// An Elector is what gocron.WithDistributedElector takes, by its method set.
var _ gocron.Elector = (*leader.Elector)(nil)

func main() {
	os.Exit(run(context.Background(), os.Stdout, os.Getenv("REDIS_ADDR")))
}

// waitLimit bounds every wait of the program.
const waitLimit = 30 * time.Second

// run runs the demonstration against the Redis at addr (empty: an embedded miniredis) and
// returns the exit code.
func run(ctx context.Context, out io.Writer, addr string) int {
	d, err := setup(addr)
	if err != nil {
		fmt.Fprintln(out, "gocron:", err)
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

// replica is what each process of the service runs: a Locker, an Elector, a gocron scheduler.
type replica struct {
	n         int
	locker    *fencing.Locker
	elector   *leader.Elector
	scheduler gocron.Scheduler
	stop      context.CancelFunc // ends the elector's Run
	done      chan error         // Run's result
}

func setup(addr string) (*demo, error) {
	d := &demo{}
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
	var nonce [4]byte
	_, _ = rand.Read(nonce[:])
	d.prefix = "gocron-example:" + hex.EncodeToString(nonce[:]) + ":"
	return d, nil
}

// start starts replica n: its elector campaigns, and its scheduler runs the job every second
// when the elector leads.
func (d *demo) start(n int) (*replica, error) {
	rp := &replica{n: n, done: make(chan error, 1)}
	// Each replica has its own Locker, as it would in its own process. The lease bounds how
	// long the ticks wait for a successor when a leader dies; a leader that shuts down
	// resigns, and the next one leads at once. Renewed a third of the way in, it leaves a
	// loaded machine 10 s to get a renewal back before the leader stops leading (and skips
	// ticks) by its own clock.
	rp.locker = fencing.New(d.rdb, fencing.WithPrefix(d.prefix), fencing.WithTTL(15*time.Second))
	rp.elector = leader.New(rp.locker, "settlement")
	ctx, stop := context.WithCancel(context.Background())
	rp.stop = stop
	go func() { rp.done <- rp.elector.Run(ctx) }()

	s, err := gocron.NewScheduler(gocron.WithDistributedElector(rp.elector), gocron.WithLocation(time.UTC))
	if err != nil {
		rp.close()
		return nil, err
	}
	rp.scheduler = s
	// Every second, on the second: every replica's timer fires for the same ticks. gocron asks
	// the elector before each run and skips the run when it does not lead.
	_, err = s.NewJob(gocron.CronJob("* * * * * *", true), gocron.NewTask(func(context.Context) {
		tick := time.Now().UTC().Truncate(time.Second)
		epoch, ok := rp.elector.Token()
		if !ok {
			return // leadership ended since gocron asked
		}
		// The write carries the epoch: a leader replaced without knowing it cannot overwrite
		// its successor's work.
		_ = d.ledger.Write("settlement", epoch, func() error {
			d.mu.Lock()
			d.runs = append(d.runs, jobRun{replica: n, tick: tick, epoch: epoch})
			d.mu.Unlock()
			return nil
		})
	}), gocron.WithName("settlement"))
	if err != nil {
		rp.close()
		return nil, err
	}
	s.Start()
	return rp, nil
}

// close stops the replica: the scheduler first (it waits for a run in progress), then the
// elector (its Run resigns), then the Locker.
func (rp *replica) close() {
	if rp.scheduler != nil {
		_ = rp.scheduler.Shutdown()
		rp.scheduler = nil
	}
	if rp.stop != nil {
		rp.stop()
		<-rp.done
		rp.stop = nil
	}
	_ = rp.locker.Close()
}

func (d *demo) close() {
	for _, rp := range d.replicas {
		rp.close()
	}
	if d.mini == nil && d.rdb != nil && d.prefix != "" {
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
	fmt.Fprintf(out, "gocron: 3 replicas of a gocron v2 scheduler with leader.Elector, a job every second (%s)\n", d.where)
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
	first.stop()
	<-first.done
	first.stop = nil
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
		if rp.scheduler != nil {
			_ = rp.scheduler.Shutdown()
			rp.scheduler = nil
		}
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
