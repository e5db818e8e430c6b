package leader_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/internal/testkit/redistest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func newLocker(t *testing.T, r *redistest.Redis, opts ...fencing.Option) *fencing.Locker {
	t.Helper()
	l := fencing.New(r.Client, append([]fencing.Option{fencing.WithPrefix(r.Prefix)}, opts...)...)
	t.Cleanup(func() { _ = l.Close() })
	return l
}

func mustAcquire(t *testing.T, l *fencing.Locker, resource string, opts ...fencing.CallOption) *fencing.Lock {
	t.Helper()
	lock, err := l.TryAcquire(t.Context(), resource, opts...)
	if err != nil {
		t.Fatalf("TryAcquire(%q): %v", resource, err)
	}
	return lock
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// waitErr returns what done delivers, failing the test after d.
func waitErr(t *testing.T, done <-chan error, d time.Duration) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(d):
		t.Fatalf("Run did not return within %v", d)
	}
	return nil
}

func queueLen(r *redistest.Redis, resource string) int64 {
	return r.Client.LLen(context.Background(), r.Prefix+"{"+resource+"}:queue").Val()
}

// keysCount returns the number of the test's keys, release records aside.
func keysCount(t *testing.T, r *redistest.Redis) int {
	t.Helper()
	keys, err := r.Client.Keys(context.Background(), r.Prefix+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, k := range keys {
		if !strings.Contains(k, "}:r:") && !strings.Contains(k, "}:b64:r:") {
			n++
		}
	}
	return n
}

type acquired struct {
	lock *fencing.Lock
	err  error
}

func acquireAsync(ctx context.Context, l *fencing.Locker, resource string, opts ...fencing.CallOption) <-chan acquired {
	ch := make(chan acquired, 1)
	go func() {
		lock, err := l.Acquire(ctx, resource, opts...)
		ch <- acquired{lock, err}
	}()
	return ch
}

func recv[T any](t *testing.T, c <-chan T, d time.Duration, what string) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(d):
		t.Fatalf("timed out after %v waiting for %s", d, what)
	}
	var zero T
	return zero
}
