package faults_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/internal/testkit/redisproc"
)

// TestClusterLimit runs a resource of limit 3 on a three-primary Redis Cluster: 120
// goroutines of 4 Lockers through Do never have more than 3 inside and reach 3 (grants
// announced with SPUBLISH from the resource's primary), every key of the resource lives on
// the primary of its slot, and a call with another limit is refused while holders live.
func TestClusterLimit(t *testing.T) {
	redisproc.Require(t)
	t.Parallel()
	cl := redisproc.StartCluster(t, 3)
	cc := cl.Client(t)
	ctx := context.Background()
	const limit, lockers, per = 3, 4, 30
	for _, name := range []string{"tenant-7", "tenant{7}"} {
		var inside, most atomic.Int32
		var wg sync.WaitGroup
		for range lockers {
			l := newLocker(t, cc, fencing.WithLimit(limit))
			for range per {
				wg.Go(func() {
					err := l.Do(ctx, name, func(context.Context) error {
						n := inside.Add(1)
						defer inside.Add(-1)
						for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
						}
						time.Sleep(2 * time.Millisecond)
						return nil
					})
					if err != nil {
						t.Errorf("%q: Do: %v", name, err)
					}
				})
			}
		}
		wg.Wait()
		if m := most.Load(); m != limit {
			t.Errorf("%q: got at most %d inside at once, want %d", name, m, limit)
		}
	}

	l := newLocker(t, cc, fencing.WithLimit(limit))
	held, err := l.TryAcquire(ctx, "tenant-8")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(ctx)
	node := cl.NodeFor(lockKey(t, "tenant-8")).Client(t)
	if typ := node.Type(ctx, lockKey(t, "tenant-8")).Val(); typ != "hash" {
		t.Errorf("the lock key on its slot's primary has type %q, want hash", typ)
	}
	for _, n := range []int{1, 2} {
		if _, err := l.TryAcquire(ctx, "tenant-8", fencing.WithLimit(n)); !errors.Is(err, fencing.ErrInvalid) {
			t.Errorf("WithLimit(%d) on a resource held with limit %d: got %v, want ErrInvalid", n, limit, err)
		}
	}
}
