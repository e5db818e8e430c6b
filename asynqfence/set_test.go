package asynqfence_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/fencekit/fencekit/asynqfence"
	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/internal/testkit/redistest"
)

// accounts locks the accounts a "transfer" task's payload names, "<from>,<to>".
func accounts(t *asynq.Task) ([]string, error) {
	if len(t.Payload()) == 0 {
		return nil, nil
	}
	from, to, ok := strings.Cut(string(t.Payload()), ",")
	if !ok {
		return nil, errors.New("bad payload")
	}
	return []string{"account:" + from, "account:" + to}, nil
}

func TestMiddlewareAllLocksEveryResource(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	l := newLocker(t, r)
	ctx := t.Context()
	var got map[string]int64
	var single bool
	h := asynqfence.MiddlewareAll(l, accounts)(asynq.HandlerFunc(func(ctx context.Context, _ *asynq.Task) error {
		got = map[string]int64{}
		for _, a := range []string{"account:a", "account:b"} {
			if tok, ok := fencing.TokenFor(ctx, a); ok {
				got[a] = tok
			}
		}
		_, single = fencing.TokenFromContext(ctx)
		return nil
	}))
	if err := h.ProcessTask(ctx, asynq.NewTask("transfer", []byte("b,a"))); err != nil {
		t.Fatalf("ProcessTask: %v", err)
	}
	if len(got) != 2 || got["account:a"] != 1 || got["account:b"] != 1 || single {
		t.Fatalf("tokens %v (single token %v), want 1 for both accounts and no single token", got, single)
	}
	if n := r.Client.Exists(ctx, r.Prefix+"{account:a}:lock", r.Prefix+"{account:b}:lock").Val(); n != 0 {
		t.Fatalf("%d locks left after the task", n)
	}

	// A busy account: the busy error, naming it; nothing left held.
	holder, err := l.TryAcquire(ctx, "account:b")
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Release(ctx)
	err = h.ProcessTask(ctx, asynq.NewTask("transfer", []byte("a,b")))
	if !asynqfence.IsBusy(err) || !errors.Is(err, fencing.ErrNotAcquired) || !strings.Contains(err.Error(), "account:b") {
		t.Fatalf("busy: got %v, want a busy error naming account:b", err)
	}
	if b := (*fencing.BusyError)(nil); !errors.As(err, &b) || b.Resource != "account:b" {
		t.Fatalf("BusyError.Resource: got %v, want account:b", err)
	}
	if n := r.Client.Exists(ctx, r.Prefix+"{account:a}:lock").Val(); n != 0 {
		t.Fatal("account:a left held after a busy task")
	}
	// A bad payload: SkipRetry. No resources: straight through.
	if err := h.ProcessTask(ctx, asynq.NewTask("transfer", []byte("x"))); !errors.Is(err, asynq.SkipRetry) {
		t.Fatalf("bad payload: got %v, want SkipRetry", err)
	}
	if err := h.ProcessTask(ctx, asynq.NewTask("other", nil)); err != nil {
		t.Fatalf("no resources: got %v, want nil", err)
	}
	bad := asynqfence.MiddlewareAll(l, nil)(asynq.HandlerFunc(func(context.Context, *asynq.Task) error { return nil }))
	if err := bad.ProcessTask(ctx, asynq.NewTask("transfer", []byte("a,b"))); !errors.Is(err, fencing.ErrInvalid) || !errors.Is(err, asynq.SkipRetry) {
		t.Fatalf("nil ResourcesFunc: got %v, want ErrInvalid and SkipRetry", err)
	}
}

func TestMiddlewareAllOppositeOrders(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	l := newLocker(t, r)
	var mu sync.Mutex
	inUse := map[string]bool{}
	h := asynqfence.MiddlewareAll(l, accounts, asynqfence.WithLockOptions(fencing.WithMaxWait(20*time.Second)))(
		asynq.HandlerFunc(func(ctx context.Context, _ *asynq.Task) error {
			mu.Lock()
			if inUse["x"] || inUse["y"] {
				mu.Unlock()
				return errors.New("account held twice")
			}
			inUse["x"], inUse["y"] = true, true
			mu.Unlock()
			time.Sleep(time.Millisecond)
			mu.Lock()
			inUse["x"], inUse["y"] = false, false
			mu.Unlock()
			return nil
		}))
	var wg sync.WaitGroup
	for i := range 40 {
		payload := "x,y"
		if i%2 == 1 {
			payload = "y,x"
		}
		wg.Go(func() {
			if err := h.ProcessTask(t.Context(), asynq.NewTask("transfer", []byte(payload))); err != nil {
				t.Errorf("%s: %v", payload, err)
			}
		})
	}
	wg.Wait()
}
