package faults_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/internal/testkit/redisproc"
)

// TestClusterHalfMigratedSlot stops a slot's migration half-way, as `redis-cli --cluster
// reshard` does between two MIGRATE batches: the resource's counter is still on the source,
// and its lock key, which does not exist (the resource is free) or has moved, is asked for on
// the target. No call may then run a script on the target, where the counter is missing and
// an INCR would issue tokens again from 1: each call of every kind fails (its declared keys
// make the Cluster answer TRYAGAIN) or takes nothing, and once the migration ends the next
// token is above every earlier one.
func TestClusterHalfMigratedSlot(t *testing.T) {
	redisproc.Require(t)
	t.Parallel()
	cl := redisproc.StartCluster(t, 3)
	client := cl.Client(t, func(o *redis.ClusterOptions) { o.MaxRedirects = 2 })
	ctx := t.Context()
	l := fencing.New(client, fencing.WithPrefix(prefix(t)), fencing.WithTTL(time.Minute))
	t.Cleanup(func() { _ = l.Close() })
	const resource = "half"
	var last int64
	for range 5 {
		lock, err := l.TryAcquire(ctx, resource)
		if err != nil {
			t.Fatal(err)
		}
		last = lock.Token()
		if err := lock.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	lock, fence := lockKey(t, resource), fenceKey(t, resource)
	from := cl.NodeFor(lock)
	var to *redisproc.Server
	for _, n := range cl.Nodes() {
		if n != from {
			to = n
			break
		}
	}
	slot := strconv.Itoa(cl.Slot(lock))
	id := func(n *redisproc.Server) string { s, _ := n.Do(ctx, "CLUSTER", "MYID").Text(); return s }
	do := func(n *redisproc.Server, args ...any) {
		t.Helper()
		if err := n.Do(ctx, args...).Err(); err != nil {
			t.Fatalf("%v on %s: %v", args, n.Addr(), err)
		}
	}
	do(to, "CLUSTER", "SETSLOT", slot, "IMPORTING", id(from))
	do(from, "CLUSTER", "SETSLOT", slot, "MIGRATING", id(to))

	// The resource is free: its lock key exists on neither node, the counter on the source.
	other := fencing.New(client, fencing.WithPrefix(prefix(t)), fencing.WithTTL(time.Minute))
	t.Cleanup(func() { _ = other.Close() })
	for _, kind := range []struct {
		name string
		opts []fencing.CallOption
	}{{"exclusive", nil}, {"shared", []fencing.CallOption{fencing.Shared()}}, {"limit 2", []fencing.CallOption{fencing.WithLimit(2)}}} {
		lock, err := other.TryAcquire(ctx, resource, kind.opts...)
		if err == nil {
			if lock.Token() <= last {
				t.Fatalf("TryAcquire (%s) during the migration: token %d, not above the last one, %d", kind.name, lock.Token(), last)
			}
			_ = lock.Release(ctx)
			continue
		}
		t.Logf("TryAcquire (%s) during the migration: %v", kind.name, err)
	}
	set, err := other.TryAcquireAll(ctx, []string{resource})
	if err == nil {
		if set.Token(resource) <= last {
			t.Fatalf("TryAcquireAll during the migration: token %d, not above %d", set.Token(resource), last)
		}
		_ = set.Release(ctx)
	}
	if n, _ := to.Do(ctx, "EXISTS", fence).Int(); n != 0 {
		t.Fatalf("a counter was made on the target: %v", to.Do(ctx, "GET", fence).Val())
	}

	// The migration ends.
	for {
		keys, err := from.Do(ctx, "CLUSTER", "GETKEYSINSLOT", slot, 100).StringSlice()
		if err != nil {
			t.Fatal(err)
		}
		if len(keys) == 0 {
			break
		}
		args := []any{"MIGRATE", "127.0.0.1", strconv.Itoa(to.Port()), "", 0, 5000, "REPLACE", "KEYS"}
		for _, k := range keys {
			args = append(args, k)
		}
		do(from, args...)
	}
	for _, n := range append([]*redisproc.Server{to, from}, cl.Nodes()...) {
		do(n, "CLUSTER", "SETSLOT", slot, "NODE", id(to))
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	next, err := other.Acquire(wctx, resource)
	if err != nil {
		t.Fatalf("after the migration: %v", err)
	}
	if next.Token() <= last {
		t.Fatalf("after the migration: token %d, not above %d", next.Token(), last)
	}
	if err := next.Release(ctx); err != nil && !errors.Is(err, fencing.ErrNotHeld) {
		t.Fatal(err)
	}
}
