package asynqfence_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/fencekit/fencekit/asynqfence"
	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/fencing/observe"
	"github.com/fencekit/fencekit/internal/testkit/redistest"
)

// enqueues records a Scheduler's enqueues through its hooks.
type enqueues struct {
	mu     sync.Mutex
	events []asynqfence.EnqueueEvent
	left   []time.Duration // the lease left when each enqueue started
}

func (q *enqueues) hooks() asynqfence.SchedulerHooks {
	return asynqfence.SchedulerHooks{
		Start: func(ctx context.Context, _ asynqfence.EnqueueEvent) context.Context {
			until, _ := fencing.ValidUntilFromContext(ctx)
			q.mu.Lock()
			q.left = append(q.left, time.Until(until))
			q.mu.Unlock()
			return ctx
		},
		End: func(_ context.Context, e asynqfence.EnqueueEvent) {
			q.mu.Lock()
			q.events = append(q.events, e)
			q.mu.Unlock()
		},
	}
}

func (q *enqueues) list() []asynqfence.EnqueueEvent {
	q.mu.Lock()
	defer q.mu.Unlock()
	return append([]asynqfence.EnqueueEvent(nil), q.events...)
}

// runScheduler runs s until the test ends and returns Run's result.
func runScheduler(t *testing.T, s *asynqfence.Scheduler) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	stopped := false
	var err error
	stop = func() error {
		if !stopped {
			stopped = true
			cancel()
			select {
			case err = <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("Run did not return after its context ended")
			}
		}
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

func TestSchedulerRegisterBadInput(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	s := asynqfence.NewScheduler(h.client, h.locker, "sched")
	for _, tc := range []struct {
		name string
		spec string
		task *asynq.Task
	}{
		{"invalid spec", "every minute", asynq.NewTask("t", nil)},
		{"too many fields", "* * * * * * *", asynq.NewTask("t", nil)},
		{"bad every", "@every soon", asynq.NewTask("t", nil)},
		{"nil task", "@every 1s", nil},
		{"empty type", "@every 1s", asynq.NewTask("", nil)},
		// Its options would not reach the task enqueued for each tick (a copy with the tick's
		// header); this case also fails if Asynq renames the field ownOptions reads.
		{"task made with options", "@every 1s", asynq.NewTask("t", nil, asynq.MaxRetry(1))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id, err := s.Register(tc.spec, tc.task)
			if !errors.Is(err, fencing.ErrInvalid) || id != "" {
				t.Fatalf("got %q, %v; want an error wrapping ErrInvalid", id, err)
			}
		})
	}
	id, err := s.Register("@every 1s", asynq.NewTask("t", nil))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Register("@every 1s", asynq.NewTask("t", nil)); !errors.Is(err, fencing.ErrInvalid) {
		t.Fatalf("registering twice: got %v, want ErrInvalid", err)
	}
	if err := s.Unregister("nope"); !errors.Is(err, fencing.ErrInvalid) {
		t.Fatalf("Unregister of an unknown ID: got %v, want ErrInvalid", err)
	}
	if err := s.Unregister(id); err != nil {
		t.Fatalf("Unregister: %v", err)
	}
	if err := s.Unregister(id); !errors.Is(err, fencing.ErrInvalid) {
		t.Fatalf("Unregister twice: got %v, want ErrInvalid", err)
	}
}

func TestSchedulerRunBadInput(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	for _, tc := range []struct {
		name string
		s    *asynqfence.Scheduler
	}{
		{"nil client", asynqfence.NewScheduler(nil, h.locker, "sched")},
		{"nil locker", asynqfence.NewScheduler(h.client, nil, "sched")},
		{"empty name", asynqfence.NewScheduler(h.client, h.locker, "")},
		{"negative catch-up", asynqfence.NewScheduler(h.client, h.locker, "sched", asynqfence.WithCatchUp(-time.Second))},
		{"zero retention", asynqfence.NewScheduler(h.client, h.locker, "sched", asynqfence.WithRetention(0))},
		{"bad leader option", asynqfence.NewScheduler(h.client, h.locker, "sched", asynqfence.WithLeaderOptions(fencing.WithTTL(0)))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := tc.s.Register("@every 1s", asynq.NewTask("t", nil), asynq.Queue(h.queue)); err != nil {
				t.Fatal(err)
			}
			if err := tc.s.Run(t.Context()); !errors.Is(err, fencing.ErrInvalid) {
				t.Fatalf("Run: got %v, want an error wrapping ErrInvalid", err)
			}
		})
	}
	if n := h.r.Client.Keys(t.Context(), "asynq:{"+h.queue+"}:*").Val(); len(n) != 0 {
		t.Fatalf("got keys %v, want nothing enqueued", n)
	}
}

// TestSchedulerEntryIDs checks that replicas registering the same entry derive the same ID,
// and that anything that makes a different entry makes a different ID.
func TestSchedulerEntryIDs(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	id := func(spec string, task *asynq.Task, opts ...asynq.Option) string {
		t.Helper()
		s := asynqfence.NewScheduler(h.client, h.locker, "sched")
		id, err := s.Register(spec, task, opts...)
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	base := id("@every 30s", asynq.NewTask("report", []byte("p")), asynq.Queue("q"))
	if again := id("@every 30s", asynq.NewTask("report", []byte("p")), asynq.Queue("q")); again != base {
		t.Fatalf("same entry in another replica: got ID %s, want %s", again, base)
	}
	seen := map[string]string{base: "base"}
	for name, other := range map[string]string{
		"spec":    id("@every 31s", asynq.NewTask("report", []byte("p")), asynq.Queue("q")),
		"type":    id("@every 30s", asynq.NewTask("report2", []byte("p")), asynq.Queue("q")),
		"payload": id("@every 30s", asynq.NewTask("report", []byte("p2")), asynq.Queue("q")),
		"queue":   id("@every 30s", asynq.NewTask("report", []byte("p")), asynq.Queue("q2")),
		"options": id("@every 30s", asynq.NewTask("report", []byte("p")), asynq.Queue("q"), asynq.MaxRetry(1)),
		"headers": id("@every 30s", asynq.NewTaskWithHeaders("report", []byte("p"), map[string]string{"k": "v"}), asynq.Queue("q")),
	} {
		if prev, dup := seen[other]; dup {
			t.Errorf("entries differing in %s and %s share the ID %s", name, prev, other)
		}
		seen[other] = name
	}
}

// TestSchedulerEnqueuesEveryTick runs one leader with an "@every 1s" entry for a few seconds:
// every tick after the first is enqueued once, with its task ID and the default retention,
// after its time and before the next tick's (a loaded machine's timers may fire late).
func TestSchedulerEnqueuesEveryTick(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	var q enqueues
	s := asynqfence.NewScheduler(h.client, h.locker, "sched", asynqfence.WithSchedulerHooks(q.hooks()))
	entry, err := s.Register("@every 1s", asynq.NewTask("tick", nil), asynq.Queue(h.queue))
	if err != nil {
		t.Fatal(err)
	}
	stop := runScheduler(t, s)
	waitFor(t, "four enqueues", func() bool { return len(q.list()) >= 4 })
	if err := stop(); !errors.Is(err, context.Canceled) {
		t.Fatalf("Run: got %v, want context.Canceled", err)
	}
	events := q.list()
	for i, e := range events {
		if e.Err != nil || e.Duplicate || e.Info == nil {
			t.Fatalf("enqueue %d: %+v", i, e)
		}
		if e.Tick.Nanosecond() != 0 {
			t.Errorf("tick %v is not on a whole second", e.Tick)
		}
		if i > 0 && e.Tick.Sub(events[i-1].Tick) != time.Second {
			t.Errorf("tick %v follows %v, want one second later", e.Tick, events[i-1].Tick)
		}
		if want := s.TaskID(entry, e.Tick); e.TaskID != want || e.Info.ID != want {
			t.Errorf("task ID: got %s (info %s), want %s", e.TaskID, e.Info.ID, want)
		}
		if e.Info.Retention != 5*time.Minute {
			t.Errorf("retention: got %v, want 5m", e.Info.Retention)
		}
		if e.Info.Queue != h.queue {
			t.Errorf("queue: got %s, want %s", e.Info.Queue, h.queue)
		}
	}
	// The first enqueue is the catch-up of the tick before leadership began.
	for _, e := range events[1:] {
		if late := e.Info.NextProcessAt.Sub(e.Tick); late >= time.Second || late < 0 {
			t.Errorf("tick %v enqueued %v after its time", e.Tick, late)
		}
	}
}

// TestSchedulerCatchUp starts a leader in the middle of an hourly entry's period: by default
// the tick at the top of the hour is enqueued at once; with WithCatchUp(0), or a bound shorter
// than how late the tick is, nothing is.
func TestSchedulerCatchUp(t *testing.T) {
	t.Parallel()
	now := time.Now()
	if now.Sub(now.Truncate(time.Hour)) > time.Hour-5*time.Second {
		t.Skip("too close to the next hour")
	}
	top := now.Truncate(time.Hour)
	late := now.Sub(top)
	for _, tc := range []struct {
		name string
		opts []asynqfence.SchedulerOption
		want bool
	}{
		{"default", nil, true},
		{"off", []asynqfence.SchedulerOption{asynqfence.WithCatchUp(0)}, false},
		{"bound above", []asynqfence.SchedulerOption{asynqfence.WithCatchUp(late + time.Minute)}, true},
		{"bound below", []asynqfence.SchedulerOption{asynqfence.WithCatchUp(late - time.Second)}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if late < 2*time.Second && !tc.want {
				t.Skip("too close to the top of the hour")
			}
			h := newHarness(t)
			var q enqueues
			s := asynqfence.NewScheduler(h.client, h.locker, "sched", append(tc.opts, asynqfence.WithSchedulerHooks(q.hooks()))...)
			entry, err := s.Register("@every 1h", asynq.NewTask("hourly", nil), asynq.Queue(h.queue))
			if err != nil {
				t.Fatal(err)
			}
			stop := runScheduler(t, s)
			waitFor(t, "leadership", func() bool {
				return h.r.Client.Exists(t.Context(), h.r.Prefix+"{sched}:lock").Val() == 1
			})
			if tc.want {
				waitFor(t, "the catch-up", func() bool { return len(q.list()) == 1 })
			} else {
				time.Sleep(200 * time.Millisecond) // nothing should come
			}
			_ = stop()
			events := q.list()
			if !tc.want {
				if len(events) != 0 {
					t.Fatalf("got %d enqueues, want none: %+v", len(events), events)
				}
				return
			}
			if len(events) != 1 || !events[0].Tick.Equal(top) || events[0].TaskID != s.TaskID(entry, top) {
				t.Fatalf("got %+v, want one enqueue of the tick at %v", events, top)
			}
			if events[0].Info.Retention != 2*time.Hour+time.Minute {
				t.Errorf("retention: got %v, want 2h1m", events[0].Info.Retention)
			}
		})
	}
}

// TestSchedulerHandOverNoDuplicate runs two schedulers of one name: the first leads and
// enqueues the hourly catch-up tick; once it stops, the second leads and enqueues the same
// tick again, which Asynq refuses by its task ID: a duplicate, not an error.
func TestSchedulerHandOverNoDuplicate(t *testing.T) {
	t.Parallel()
	if time.Since(time.Now().Truncate(time.Hour)) > time.Hour-5*time.Second {
		t.Skip("too close to the next hour")
	}
	h := newHarness(t)
	var q enqueues
	var handled []error
	first := asynqfence.NewScheduler(h.client, h.locker, "sched", asynqfence.WithSchedulerHooks(q.hooks()))
	second := asynqfence.NewScheduler(h.client, newLocker(t, h.r), "sched", asynqfence.WithSchedulerHooks(q.hooks()),
		asynqfence.WithEnqueueErrorHandler(func(_ *asynq.Task, _ []asynq.Option, err error) { handled = append(handled, err) }))
	for _, s := range []*asynqfence.Scheduler{first, second} {
		if _, err := s.Register("@every 1h", asynq.NewTask("hourly", []byte("x")), asynq.Queue(h.queue)); err != nil {
			t.Fatal(err)
		}
	}
	stopFirst := runScheduler(t, first)
	waitFor(t, "the first leader's enqueue", func() bool { return len(q.list()) == 1 })
	runScheduler(t, second)
	_ = stopFirst()
	waitFor(t, "the second leader's enqueue", func() bool { return len(q.list()) == 2 })
	events := q.list()
	if events[0].Duplicate || !events[1].Duplicate || events[1].Err != nil || events[0].TaskID != events[1].TaskID {
		t.Fatalf("got %+v, want the tick enqueued, then a duplicate of it", events)
	}
	if len(handled) != 0 {
		t.Fatalf("error handler called with %v for a duplicate", handled)
	}
	if n := len(h.r.Client.Keys(t.Context(), "asynq:{"+h.queue+"}:t:*").Val()); n != 1 {
		t.Fatalf("got %d tasks in the queue, want 1", n)
	}
}

// TestSchedulerStopsBeforeLeaseEnds cuts the leader off from the Redis of its lock (Asynq's
// Redis stays up): it enqueues no tick in the last part of its lease, and none after it.
func TestSchedulerStopsBeforeLeaseEnds(t *testing.T) {
	t.Parallel()
	lockRedis := redistest.New(t)
	if lockRedis.Mini == nil {
		t.Skip("needs miniredis's SetError")
	}
	h := newHarness(t)
	const ttl = 2 * time.Second
	var q enqueues
	s := asynqfence.NewScheduler(h.client, newLocker(t, lockRedis), "sched",
		asynqfence.WithLeaderOptions(fencing.WithTTL(ttl)), asynqfence.WithSchedulerHooks(q.hooks()), asynqfence.WithCatchUp(0))
	if _, err := s.Register("@every 1s", asynq.NewTask("tick", nil), asynq.Queue(h.queue)); err != nil {
		t.Fatal(err)
	}
	runScheduler(t, s)
	waitFor(t, "an enqueue", func() bool { return len(q.list()) >= 1 })
	cut := time.Now()
	lockRedis.Mini.SetError("LOADING Redis is loading the dataset in memory")
	time.Sleep(ttl + 1500*time.Millisecond)
	q.mu.Lock()
	defer q.mu.Unlock()
	for i, left := range q.left {
		if left < 400*time.Millisecond {
			t.Errorf("enqueue %d started with %v of the lease left", i, left)
		}
	}
	for _, e := range q.events {
		if e.Tick.After(cut.Add(ttl)) {
			t.Errorf("tick %v enqueued after the lease ran out (cut at %v)", e.Tick, cut)
		}
	}
	t.Logf("%d enqueues; the last tick %v, %v after the cut", len(q.events), q.events[len(q.events)-1].Tick, q.events[len(q.events)-1].Tick.Sub(cut))
}

// TestSchedulerRegisterWhileLeading registers entries while the scheduler leads: an entry
// registered during a term gets no catch-up (its next tick is its first), and an entry
// unregistered is enqueued no more.
func TestSchedulerRegisterWhileLeading(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	var q enqueues
	renewed := make(chan struct{}, 1)
	leaderHooks := fencing.WithHooks(observe.Hooks{End: func(_ context.Context, e observe.Event) {
		if e.Op == observe.OpRenew {
			select {
			case renewed <- struct{}{}:
			default:
			}
		}
	}})
	s := asynqfence.NewScheduler(h.client, h.locker, "sched", asynqfence.WithSchedulerHooks(q.hooks()),
		// A lease a loaded machine cannot let run out between renewals: a lost term would begin
		// a new one, which rightly catches up the hourly entry this test says must not.
		asynqfence.WithLeaderOptions(fencing.WithTTL(3*time.Second), leaderHooks))
	runScheduler(t, s)
	// The term has begun by its first renewal, a third of the lease after the win.
	select {
	case <-renewed:
	case <-time.After(10 * time.Second):
		t.Fatal("no renewal")
	}
	if _, err := s.Register("@every 1h", asynq.NewTask("hourly", nil), asynq.Queue(h.queue)); err != nil {
		t.Fatal(err)
	}
	every, err := s.Register("@every 1s", asynq.NewTask("tick", nil), asynq.Queue(h.queue))
	if err != nil {
		t.Fatal(err)
	}
	registered := time.Now()
	waitFor(t, "two ticks", func() bool { return len(q.list()) >= 2 })
	if err := s.Unregister(every); err != nil {
		t.Fatal(err)
	}
	unregistered := time.Now()
	n := len(q.list())
	time.Sleep(1200 * time.Millisecond)
	events := q.list()
	for _, e := range events {
		if e.EntryID != every {
			t.Errorf("enqueued %s at %v: an entry registered during the term got a catch-up", e.Task.Type(), e.Tick)
		}
		if e.Tick.Before(registered) {
			t.Errorf("tick %v is before the entry was registered (%v)", e.Tick, registered)
		}
	}
	if len(events) > n+1 { // one may have been in flight
		t.Errorf("got %d enqueues after Unregister, want none", len(events)-n)
	}
	for _, e := range events {
		if e.Tick.After(unregistered.Add(time.Second)) {
			t.Errorf("tick %v enqueued after Unregister at %v", e.Tick, unregistered)
		}
	}
}

// TestSchedulerLeaderHooksAddUp shows why docs/asynq.md says to give hooks once: hooks on the
// Locker already observe the scheduler's campaigns and terms, and the same hooks given again
// in WithLeaderOptions observe each of them twice.
func TestSchedulerLeaderHooksAddUp(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		leader bool // the hooks also in WithLeaderOptions
		want   int
	}{
		{"on the locker", false, 1},
		{"on the locker and in the leader options", true, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := redistest.New(t)
			var mu sync.Mutex
			ends := map[observe.Op]int{}
			hooks := fencing.WithHooks(observe.Hooks{End: func(_ context.Context, e observe.Event) {
				mu.Lock()
				ends[e.Op]++
				mu.Unlock()
			}})
			count := func(op observe.Op) int {
				mu.Lock()
				defer mu.Unlock()
				return ends[op]
			}
			l := newLocker(t, r, hooks)
			var opts []asynqfence.SchedulerOption
			if tc.leader {
				opts = append(opts, asynqfence.WithLeaderOptions(hooks))
			}
			s := asynqfence.NewScheduler(asynq.NewClientFromRedisClient(r.Client), l, "sched", opts...)
			stop := runScheduler(t, s)
			waitFor(t, "the campaign won", func() bool { return count(observe.OpCampaign) > 0 })
			if err := stop(); !errors.Is(err, context.Canceled) {
				t.Fatalf("Run: got %v, want context.Canceled", err)
			}
			if got, got2 := count(observe.OpCampaign), count(observe.OpLead); got != tc.want || got2 != tc.want {
				t.Fatalf("one campaign and one term: the hooks saw %d campaign(s) and %d term(s), want %d of each", got, got2, tc.want)
			}
		})
	}
}
