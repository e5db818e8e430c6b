package asynqfence_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/hibiken/asynq"

	"github.com/fencekit/fencekit/asynqfence"
	"github.com/fencekit/fencekit/fencing"
)

// TestServerLabels runs tasks through a real asynq.Server and, from inside each handler,
// reads the holders of its locks with Locker.Inspect: each acquisition is labelled with the
// task's ID, as Asynq gives it to the handler; a custom ID over fencing.MaxLabelLen keeps its
// start and its end around "…" (the task runs); a fencing.WithLabel of WithLockOptions wins;
// both locks of a task with an entity, and every lock of MiddlewareAll, carry the label.
func TestServerLabels(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	var mu sync.Mutex
	seen := map[string]map[string]string{} // task ID -> resource -> holder's label
	inspect := func(resources ...string) asynq.Handler {
		return asynq.HandlerFunc(func(ctx context.Context, task *asynq.Task) error {
			id, _ := asynq.GetTaskID(ctx)
			labels := map[string]string{}
			for _, r := range resources {
				st, err := h.locker.Inspect(ctx, r)
				if err != nil {
					return err
				}
				if len(st.Holders) != 1 {
					return fmt.Errorf("%s: %d holders, want 1", r, len(st.Holders))
				}
				labels[r] = st.Holders[0].Label
			}
			mu.Lock()
			seen[id] = labels
			mu.Unlock()
			return nil
		})
	}
	account := func(*asynq.Task) (string, error) { return "account:1", nil }
	mux := asynq.NewServeMux()
	mux.Handle("plain", asynqfence.Wrap(inspect("account:1"), h.locker, account))
	mux.Handle("mine", asynqfence.Wrap(inspect("account:1"), h.locker, account,
		asynqfence.WithLockOptions(fencing.WithLabel("nightly run"))))
	mux.Handle("entity", asynqfence.Wrap(inspect("tenant:1", "export:7"), h.locker,
		func(*asynq.Task) (string, error) { return "tenant:1", nil },
		asynqfence.WithLimit(2), asynqfence.WithEntity(func(*asynq.Task) (string, error) { return "export:7", nil })))
	mux.Handle("all", asynqfence.MiddlewareAll(h.locker, func(*asynq.Task) ([]string, error) {
		return []string{"account:a", "account:b"}, nil
	})(inspect("account:a", "account:b")))
	h.serve(t, mux, asynq.Config{Concurrency: 1})

	long := "import:" + strings.Repeat("0123456789", 8) + ":2026-01-31" // 98 bytes
	tests := []struct {
		typ, id string // id: "" for Asynq's own
		want    func(id string) string
	}{
		{typ: "plain", want: func(id string) string { return id }},
		{typ: "plain", id: long, want: func(string) string { return long[:30] + "…" + long[len(long)-31:] }},
		{typ: "mine", want: func(string) string { return "nightly run" }},
		{typ: "entity", want: func(id string) string { return id }},
		{typ: "all", want: func(id string) string { return id }},
	}
	ids := make([]string, len(tests))
	for i, tt := range tests {
		var opts []asynq.Option
		if tt.id != "" {
			opts = append(opts, asynq.TaskID(tt.id))
		}
		ids[i] = h.enqueue(t, tt.typ, "", opts...)
	}
	for i, tt := range tests {
		h.waitState(t, ids[i], asynq.TaskStateCompleted)
		want := tt.want(ids[i])
		if len(want) > fencing.MaxLabelLen {
			t.Fatalf("test %d: want label of %d bytes", i, len(want))
		}
		mu.Lock()
		labels := seen[ids[i]]
		mu.Unlock()
		if len(labels) == 0 {
			t.Errorf("%s task %s: the handler saw no lock", tt.typ, ids[i])
		}
		for r, got := range labels {
			if got != want {
				t.Errorf("%s task %s: %s's holder labelled %q, want %q", tt.typ, ids[i], r, got, want)
			}
		}
	}
	h.checkStats(t, len(tests), 0)
}

// TestWrapLabelWithoutTaskID checks that a handler called outside an Asynq server (no task
// ID in its context, a task made by asynq.NewTask) runs with no label.
func TestWrapLabelWithoutTaskID(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	var got []string
	wrapped := asynqfence.Wrap(asynq.HandlerFunc(func(ctx context.Context, _ *asynq.Task) error {
		st, err := h.locker.Inspect(ctx, "acct")
		for _, holder := range st.Holders {
			got = append(got, holder.Label)
		}
		return err
	}), h.locker, byPayload)
	if err := wrapped.ProcessTask(t.Context(), asynq.NewTask("job", []byte("acct"))); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0] != "" {
		t.Fatalf("got labels %q, want one holder without a label", got)
	}
}
