package main

import (
	"context"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"

	"github.com/fencekit/fencekit/asynqfence"
	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/fencing/observe"
)

// typeReport is the scheduled task: every replica registers it, the leader enqueues it.
const typeReport = "report:build"

// ticks records the report tasks the workers processed, by task ID.
type ticks struct {
	mu   sync.Mutex
	seen map[string]int
}

func (tk *ticks) process(ctx context.Context, _ *asynq.Task) error {
	id, _ := asynq.GetTaskID(ctx)
	tk.mu.Lock()
	defer tk.mu.Unlock()
	if tk.seen == nil {
		tk.seen = make(map[string]int)
	}
	tk.seen[id]++
	return nil
}

// replica is one replica's scheduler, as each process of a service would run it.
type replica struct {
	n       int
	locker  *fencing.Locker
	stop    context.CancelFunc
	done    chan error
	leading atomic.Int64 // the epoch while it leads, 0 otherwise
	won     atomic.Int64 // when it last won, in Unix nanoseconds
}

// schedule runs three replicas of one asynqfence.Scheduler with an "@every 1s" entry: only
// the leader enqueues; when it stops, the next replica takes over at once. Every tick's task
// is processed once. It returns what went wrong, if anything.
func (d *demo) schedule(ctx context.Context, out io.Writer) ([]string, error) {
	fmt.Fprintln(out, "3. three replicas run the scheduler (@every 1s); only the leader enqueues")
	var enqueued, duplicates, failed atomic.Int64
	counts := asynqfence.SchedulerHooks{End: func(_ context.Context, e asynqfence.EnqueueEvent) {
		switch {
		case e.Err != nil: // counted by the error handler, unless a replica was stopping
		case e.Duplicate:
			duplicates.Add(1)
		default:
			enqueued.Add(1)
		}
	}}
	replicas := make([]*replica, 3)
	for i := range replicas {
		rp := &replica{n: i + 1, done: make(chan error, 1)}
		// Each replica has its own Locker, as it would in its own process.
		rp.locker = fencing.New(d.rdb, fencing.WithPrefix(d.prefix), d.trace.Lock)
		terms := observe.Hooks{End: func(_ context.Context, e observe.Event) {
			switch {
			case e.Op == observe.OpCampaign && e.Outcome == observe.OutcomeAcquired:
				rp.won.Store(time.Now().UnixNano())
				rp.leading.Store(e.Token)
			case e.Op == observe.OpLead:
				rp.leading.Store(0)
			}
		}}
		s := asynqfence.NewScheduler(d.client, rp.locker, "reports",
			// The lease: a dead leader's ticks wait at most this long for a successor.
			asynqfence.WithLeaderOptions(fencing.WithTTL(2*time.Second), fencing.WithHooks(terms)),
			asynqfence.WithSchedulerHooks(counts),
			asynqfence.WithEnqueueErrorHandler(func(_ *asynq.Task, _ []asynq.Option, err error) {
				failed.Add(1)
				fmt.Fprintf(out, "   replica %d: enqueue failed: %v\n", rp.n, err)
			}))
		// Every replica registers the same entries and so derives the same entry IDs, which
		// the task IDs are made of.
		if _, err := s.Register("@every 1s", asynq.NewTask(typeReport, nil), asynq.Queue(d.queue)); err != nil {
			return nil, err
		}
		rctx, stop := context.WithCancel(ctx)
		rp.stop = stop
		go func() { rp.done <- s.Run(rctx) }()
		replicas[i] = rp
	}
	stopAll := func() {
		for _, rp := range replicas {
			if rp.stop != nil {
				rp.stop()
				<-rp.done
				rp.stop = nil
				_ = rp.locker.Close()
			}
		}
	}
	defer stopAll()
	leader := func() *replica {
		for _, rp := range replicas {
			if rp.stop != nil && rp.leading.Load() != 0 {
				return rp
			}
		}
		return nil
	}
	var problems []string
	if err := waitFor(ctx, func() bool { return leader() != nil }); err != nil {
		return nil, fmt.Errorf("no replica leads: %w", err)
	}
	time.Sleep(2500 * time.Millisecond)
	old := leader()
	epoch := old.leading.Load()
	stopped := time.Now()
	old.stop() // a rolling deploy: the leader shuts down and resigns
	<-old.done
	old.stop = nil
	_ = old.locker.Close()
	if err := waitFor(ctx, func() bool { return leader() != nil }); err != nil {
		return nil, fmt.Errorf("no replica took over: %w", err)
	}
	next := leader()
	fmt.Fprintf(out, "   replica %d led (epoch %d) and shut down; replica %d took over (epoch %d) %v later\n",
		old.n, epoch, next.n, next.leading.Load(), time.Unix(0, next.won.Load()).Sub(stopped).Round(time.Millisecond))
	time.Sleep(2500 * time.Millisecond)
	stopAll()
	if err := d.waitIdle(ctx); err != nil {
		return nil, err
	}
	d.ticks.mu.Lock()
	processed, twice := len(d.ticks.seen), 0
	for _, n := range d.ticks.seen {
		if n > 1 {
			twice++
		}
	}
	d.ticks.mu.Unlock()
	fmt.Fprintf(out, "   %d ticks enqueued, each once (%d duplicates refused by task ID); %d processed, %d of them twice\n",
		enqueued.Load(), duplicates.Load(), processed, twice)
	switch {
	case enqueued.Load() < 4:
		problems = append(problems, fmt.Sprintf("only %d ticks enqueued in 5s", enqueued.Load()))
	case int64(processed) != enqueued.Load():
		problems = append(problems, fmt.Sprintf("%d ticks enqueued, %d processed", enqueued.Load(), processed))
	case failed.Load() > 0:
		problems = append(problems, fmt.Sprintf("%d enqueues failed", failed.Load()))
	}
	return problems, nil
}
