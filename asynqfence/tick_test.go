package asynqfence_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/fencekit/fencekit/asynqfence"
)

func TestTickOf(t *testing.T) {
	t.Parallel()
	tick := time.Date(2025, 1, 31, 2, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name string
		task *asynq.Task
		want time.Time
		ok   bool
	}{
		{"nil task", nil, time.Time{}, false},
		{"no headers", asynq.NewTask("t", nil), time.Time{}, false},
		{"other headers", asynq.NewTaskWithHeaders("t", nil, map[string]string{"k": "v"}), time.Time{}, false},
		{"malformed", asynq.NewTaskWithHeaders("t", nil, map[string]string{asynqfence.TickHeader: "yesterday"}), time.Time{}, false},
		{"unix seconds", asynq.NewTaskWithHeaders("t", nil, map[string]string{asynqfence.TickHeader: "1738288800"}), time.Time{}, false},
		{"tick", asynq.NewTaskWithHeaders("t", nil, map[string]string{asynqfence.TickHeader: "2025-01-31T02:00:00Z"}), tick, true},
		{"offset", asynq.NewTaskWithHeaders("t", nil, map[string]string{asynqfence.TickHeader: "2025-01-31T03:00:00+01:00"}), tick, true},
		{"fraction", asynq.NewTaskWithHeaders("t", nil, map[string]string{asynqfence.TickHeader: "2025-01-31T02:00:00.5Z"}), tick.Add(500 * time.Millisecond), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := asynqfence.TickOf(tc.task)
			if ok != tc.ok || !got.Equal(tc.want) {
				t.Fatalf("got %v, %v; want %v, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}

// attempt is one run of a scheduled task, as its handler saw it.
type attempt struct {
	typ    string
	id     string
	retry  int
	tick   time.Time
	ok     bool
	tenant string
}

// TestSchedulerTickOf runs a Scheduler with two "@every 1s" entries and a real Asynq server
// whose handler fails each "tick" task's first attempt and every "doomed" task (which has no
// retries, so it is archived at once): TickOf gives every attempt the tick of its task ID,
// the same on the retry, the ErrorHandler sees it too, and so does an archived task's
// TaskInfo; the task's own headers stay. A task enqueued directly has no tick.
func TestSchedulerTickOf(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	var (
		mu       sync.Mutex
		attempts []attempt
		failures []attempt
	)
	h.serve(t, asynq.HandlerFunc(func(ctx context.Context, task *asynq.Task) error {
		id, _ := asynq.GetTaskID(ctx)
		retry, _ := asynq.GetRetryCount(ctx)
		tick, ok := asynqfence.TickOf(task)
		mu.Lock()
		attempts = append(attempts, attempt{task.Type(), id, retry, tick, ok, task.Headers()["tenant"]})
		mu.Unlock()
		if task.Type() == "doomed" || (task.Type() == "tick" && retry == 0) {
			return errors.New("fails on purpose")
		}
		return nil
	}), asynq.Config{
		ErrorHandler: asynq.ErrorHandlerFunc(func(_ context.Context, task *asynq.Task, _ error) {
			tick, ok := asynqfence.TickOf(task)
			mu.Lock()
			failures = append(failures, attempt{typ: task.Type(), tick: tick, ok: ok})
			mu.Unlock()
		}),
	})
	s := asynqfence.NewScheduler(h.client, h.locker, "sched")
	tickEntry, err := s.Register("@every 1s", asynq.NewTaskWithHeaders("tick", nil, map[string]string{"tenant": "acme"}),
		asynq.Queue(h.queue), asynq.MaxRetry(3))
	if err != nil {
		t.Fatal(err)
	}
	doomedEntry, err := s.Register("@every 1s", asynq.NewTask("doomed", nil), asynq.Queue(h.queue), asynq.MaxRetry(0))
	if err != nil {
		t.Fatal(err)
	}
	plain := h.enqueue(t, "plain", "")
	stop := runScheduler(t, s)
	snapshot := func() ([]attempt, []attempt) {
		mu.Lock()
		defer mu.Unlock()
		return append([]attempt(nil), attempts...), append([]attempt(nil), failures...)
	}
	waitFor(t, "a retried tick task and an archived one", func() bool {
		as, _ := snapshot()
		retried, doomed := false, false
		for _, a := range as {
			retried = retried || (a.typ == "tick" && a.retry == 1)
			doomed = doomed || a.typ == "doomed"
		}
		return retried && doomed
	})
	if err := stop(); !errors.Is(err, context.Canceled) {
		t.Fatalf("Run: got %v, want context.Canceled", err)
	}

	as, fs := snapshot()
	first := map[string]time.Time{} // by task ID: the tick its first attempt saw
	retried := 0
	for _, a := range as {
		switch {
		case a.typ == "plain":
			if a.ok || a.id != plain {
				t.Errorf("task %s enqueued directly: TickOf got %v, %v; want false", a.id, a.tick, a.ok)
			}
			continue
		case !a.ok:
			t.Errorf("%s task %s, attempt %d: TickOf false", a.typ, a.id, a.retry+1)
			continue
		}
		entry := tickEntry
		if a.typ == "doomed" {
			entry = doomedEntry
		}
		if want := s.TaskID(entry, a.tick); a.id != want {
			t.Errorf("%s task %s, attempt %d: TickOf got %v, whose task ID is %s", a.typ, a.id, a.retry+1, a.tick, want)
		}
		if a.tick.Location() != time.UTC || a.tick.Nanosecond() != 0 {
			t.Errorf("TickOf got %v, want a whole second in UTC", a.tick)
		}
		if a.typ == "tick" && a.tenant != "acme" {
			t.Errorf("tick task %s: header tenant got %q, want the registered task's %q", a.id, a.tenant, "acme")
		}
		if a.retry == 0 {
			first[a.id] = a.tick
		} else {
			retried++
			if !a.tick.Equal(first[a.id]) {
				t.Errorf("task %s: TickOf got %v on attempt %d, %v on the first", a.id, a.tick, a.retry+1, first[a.id])
			}
		}
	}
	if retried == 0 {
		t.Fatal("no retry seen")
	}
	for _, f := range fs {
		if !f.ok {
			t.Errorf("ErrorHandler: TickOf of a failed %s task false", f.typ)
		}
	}
	archived, err := h.insp.ListArchivedTasks(h.queue)
	if err != nil {
		t.Fatal(err)
	}
	if len(archived) == 0 {
		t.Fatal("no archived task")
	}
	for _, info := range archived {
		tick, ok := asynqfence.TickOf(asynq.NewTaskWithHeaders(info.Type, info.Payload, info.Headers))
		if !ok || s.TaskID(doomedEntry, tick) != info.ID {
			t.Errorf("archived task %s: TickOf got %v, %v; want the tick of its task ID", info.ID, tick, ok)
		}
	}
}
