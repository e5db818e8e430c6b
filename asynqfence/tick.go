package asynqfence

import (
	"maps"
	"reflect"
	"time"

	"github.com/hibiken/asynq"
)

// TickHeader is the task header in which a [Scheduler] records the tick a task was enqueued
// for: its scheduled time in UTC, in RFC 3339 with as many fractional digits as it has, such
// as "2025-01-31T02:00:00Z". Asynq stores a task's headers with the task, so the header stays
// through retries and archiving: a handler, an ErrorHandler, a RetryDelayFunc and the
// Inspector's [asynq.TaskInfo].Headers all see it. Read it with [TickOf].
const TickHeader = "asynqfence-tick"

// TickOf returns the tick a task was enqueued for by a [Scheduler]: the scheduled time (in
// UTC) of the cron entry's tick, which can be well before the task runs (a queue that is
// behind, a retry, a catch-up after a change of leader). A scheduled job that processes "the
// day before the tick" reads it here rather than from the clock. The second result is false
// for a nil task and for any task without a valid [TickHeader]: tasks enqueued otherwise
// than by a Scheduler. An archived task's [asynq.TaskInfo] gives it back with
// TickOf(asynq.NewTaskWithHeaders(info.Type, info.Payload, info.Headers)).
func TickOf(t *asynq.Task) (time.Time, bool) {
	if t == nil {
		return time.Time{}, false
	}
	v, ok := t.Headers()[TickHeader]
	if !ok {
		return time.Time{}, false
	}
	tick, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}, false
	}
	return tick, true
}

// taskFor returns the task to enqueue for one tick of e: its task with the tick's header.
func (e *entry) taskFor(tick time.Time) *asynq.Task {
	headers := make(map[string]string, len(e.task.Headers())+1)
	maps.Copy(headers, e.task.Headers())
	headers[TickHeader] = tick.UTC().Format(time.RFC3339Nano)
	return asynq.NewTaskWithHeaders(e.task.Type(), e.task.Payload(), headers)
}

// ownOptions reports whether task carries options given to asynq.NewTask. Asynq keeps them
// in an unexported field and applies them only when that very task is enqueued; a Scheduler
// enqueues a copy with the tick's header, which cannot carry them, so Register refuses such a
// task rather than drop them. A test pins the field: if Asynq renamed it, the check would
// find nothing and the test would fail.
func ownOptions(task *asynq.Task) bool {
	v := reflect.ValueOf(task).Elem().FieldByName("opts")
	return v.IsValid() && v.Kind() == reflect.Slice && v.Len() > 0
}
