package errorstest

import (
	"context"
	"testing"
	"time"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/fencing/fencingtest"
	"github.com/fencekit/fencekit/internal/testkit/redistest"
)

// env is one case's Redis (miniredis, or the real Redis of FENCING_REDIS_ADDR, with a prefix
// of the case's own), a Locker on it to provoke errors with, and another process's Locker
// that holds what the case needs held.
type env struct {
	r      *redistest.Redis
	locker *fencing.Locker
	other  *fencing.Locker
}

// newEnv returns the env of t, whose Locker has opts besides the prefix.
func newEnv(t *testing.T, opts ...fencing.Option) *env {
	t.Helper()
	e := &env{r: redistest.New(t)}
	e.locker = e.newLocker(t, opts...)
	e.other = fencing.New(e.r.NewClient(t), fencing.WithPrefix(e.r.Prefix))
	t.Cleanup(func() { _ = e.other.Close() })
	return e
}

// newLocker returns another Locker on the env's Redis and prefix, with opts, closed when t
// ends.
func (e *env) newLocker(t *testing.T, opts ...fencing.Option) *fencing.Locker {
	t.Helper()
	l := fencing.New(e.r.Client, append([]fencing.Option{fencing.WithPrefix(e.r.Prefix)}, opts...)...)
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// closed returns a Locker on the env's Redis that is closed.
func (e *env) closed(t *testing.T) *fencing.Locker {
	t.Helper()
	l := e.newLocker(t)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return l
}

// hold makes the other process hold resource, with opts, until t ends (its lease is 30s and
// is not renewed: miniredis's clock does not move, and a case on a real Redis ends well
// before).
func (e *env) hold(t *testing.T, resource string, opts ...fencing.CallOption) *fencing.Lock {
	t.Helper()
	k, err := e.other.TryAcquire(t.Context(), resource, opts...)
	if err != nil {
		t.Fatalf("hold %q: %v", resource, err)
	}
	t.Cleanup(func() { _ = k.Release(context.Background()) })
	return k
}

// key returns the Redis key of resource's lock.
func (e *env) key(resource string) string { return e.r.Prefix + "{" + resource + "}:lock" }

// drop deletes resource's lock: its holder's next renewal finds it gone.
func (e *env) drop(t *testing.T, resource string) {
	t.Helper()
	if err := e.r.Client.Del(context.Background(), e.key(resource)).Err(); err != nil {
		t.Fatalf("delete the lock of %q: %v", resource, err)
	}
}

// shortLease is the lease of the cases whose lock is lost while work runs: Do renews it
// every third of it, and the first renewal after the lock is dropped finds it gone, a second
// in. Not shorter: the acquisition's reply must come back within it on a loaded machine, or
// the call is not acquired ("Redis replied after the lease could have run out").
var shortLease = fencing.WithTTL(3 * time.Second)

// loseByRenewal, called in the work of Do, DoAll or Lead that holds resource with
// shortLease, drops its lock, waits until the work's context is cancelled and returns the
// cause, as work that stops when told should.
func (e *env) loseByRenewal(ctx context.Context, t *testing.T, resource string) error {
	t.Helper()
	e.drop(t, resource)
	<-ctx.Done()
	return context.Cause(ctx)
}

// takeOver, called in the work of Do, DoAll or Lead, stalls it past its lease and runs the
// next holder's work (nothing) to its end: the work's locks are another's, and released,
// when it returns.
func takeOver(ctx context.Context, t *testing.T) {
	t.Helper()
	if err := fencingtest.Takeover(ctx, func(context.Context) error { return nil }); err != nil {
		t.Errorf("takeover: %v", err)
	}
}

// noop is work that does nothing.
func noop(context.Context) error { return nil }
