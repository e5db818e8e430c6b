package fencing_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/internal/testkit/redistest"
)

// TestLabels: a label travels with each kind of acquisition, direct or granted from the
// queue, and Inspect shows it for holders and waiters; a bad label is refused before
// anything is written.
func TestLabels(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	l, other := newLocker(t, r), newLocker(t, r)
	ctx := t.Context()
	for _, label := range []string{"task 7f3a-e1", "héllo: a.b~c{d}", strings.Repeat("x", fencing.MaxLabelLen-2)} {
		held := mustAcquire(t, l, "res", fencing.WithLabel(label))
		waiting := acquireAsync(ctx, other, "res", fencing.Shared(), fencing.WithLabel(label+"/w"))
		waitFor(t, 5*time.Second, "the waiter to queue", func() bool { return queueLen(r, "res") == 1 })
		st, err := l.Inspect(ctx, "res")
		if err != nil {
			t.Fatal(err)
		}
		if len(st.Holders) != 1 || st.Holders[0].Label != label || len(st.Waiters) != 1 || st.Waiters[0].Label != label+"/w" || !st.Waiters[0].Shared {
			t.Fatalf("label %q: got %+v, want it on the holder and %q on the shared waiter", label, st, label+"/w")
		}
		if err := held.Release(ctx); err != nil {
			t.Fatal(err)
		}
		got := recv(t, waiting, 5*time.Second, "the grant")
		if got.err != nil {
			t.Fatal(got.err)
		}
		st, err = l.Inspect(ctx, "res")
		if err != nil || len(st.Holders) != 1 || st.Holders[0].Label != label+"/w" || st.Holders[0].Token != got.lock.Token() {
			t.Fatalf("label %q: after the grant got %+v, %v; want the granted holder labeled %q", label, st, err, label+"/w")
		}
		if err := got.lock.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for _, bad := range []string{strings.Repeat("x", fencing.MaxLabelLen+1), "a\nb", "\xff"} {
		if _, err := l.TryAcquire(ctx, "bad", fencing.WithLabel(bad)); !errors.Is(err, fencing.ErrInvalid) {
			t.Errorf("label %q: got %v, want ErrInvalid", bad, err)
		}
	}
	if err := fencing.New(r.Client, fencing.WithPrefix(r.Prefix), fencing.WithLabel("x")).Err(); !errors.Is(err, fencing.ErrInvalid) {
		t.Errorf("WithLabel given to New: got %v, want ErrInvalid", err)
	}
	if v, _ := r.Client.Exists(context.Background(), r.Prefix+"{bad}:fence").Result(); v != 0 {
		t.Error("a bad label wrote the counter")
	}
}
