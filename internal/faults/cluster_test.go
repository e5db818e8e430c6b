package faults_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/fencing/observe"
	"github.com/fencekit/fencekit/internal/testkit/redisproc"
	"github.com/fencekit/fencekit/servercheck"
)

// TestCluster runs the Locker on a *redis.ClusterClient against a real three-primary
// Redis Cluster: awkward resource names never meet CROSSSLOT and their keys live on the
// node that serves their slot; a waiting Acquire wakes on a release published from
// another node; Do renews on the cluster; WithReplicas works through the key's primary;
// and CheckServer checks every primary.
func TestCluster(t *testing.T) {
	redisproc.Require(t)
	t.Parallel()
	cl := redisproc.StartCluster(t, 3)
	cc := cl.Client(t)
	ctx := context.Background()
	l := newLocker(t, cc)
	top := t // l's keys use the test's prefix, not a subtest's

	t.Run("names", func(t *testing.T) {
		names := []string{"order-42", "{", "}", "{}", "}{", "}abc", "{x}", "a{}b", "a{b}c", "{{}}", "\xff\x00binary", "line\nbreak", "x:fence", "ew", strings.Repeat("n", 1000)}
		nodes := map[string]int{}
		for _, name := range names {
			lock, err := l.TryAcquire(ctx, name, fencing.WithTTL(time.Minute))
			if err != nil {
				t.Errorf("%q: TryAcquire: %v", name, err)
				continue
			}
			node := cl.NodeFor(lockKey(top, name))
			nodes[node.Addr()]++
			if v, err := node.Do(ctx, "GET", fenceKey(top, name)).Text(); err != nil || v != "1" {
				t.Errorf("%q: fence key on %s: %q, %v", name, node.Addr(), v, err)
			}
			if err := lock.Extend(ctx, time.Minute); err != nil {
				t.Errorf("%q: Extend: %v", name, err)
			}
			if _, err := lock.TTL(ctx); err != nil {
				t.Errorf("%q: TTL: %v", name, err)
			}
			if err := lock.Release(ctx); err != nil {
				t.Errorf("%q: Release: %v", name, err)
			}
			if lock, err := l.TryAcquire(ctx, name); err != nil || lock.Token() != 2 {
				t.Errorf("%q: second TryAcquire: %v, %v; want token 2", name, lock, err)
			} else {
				_ = lock.Release(ctx)
			}
		}
		if _, err := l.TryAcquire(ctx, ""); !errors.Is(err, fencing.ErrInvalid) {
			t.Errorf("empty name: got %v, want ErrInvalid", err)
		}
		if t.Failed() {
			return
		}
		figure(t, "cluster-names", "names=%d crossslot_errors=0 other_errors=0 keys_per_node=%v", len(names), nodeCounts(cl, nodes))
	})

	t.Run("grant-across-lockers", func(t *testing.T) {
		// The waiter is another Locker (process). Its announcement channel is a shard
		// channel: it subscribes on the primary that owns the resource's slot, and the
		// release there grants it the lock and announces it with SPUBLISH. Polling is at
		// most once a second (0.8 s with jitter), so a quicker hand-over came from the
		// announcement. Awkward names land on different primaries.
		holder := newLocker(t, cc)
		waiter := newLocker(t, cc, fencing.WithRetryBackoff(5*time.Second, 10*time.Second))
		nodes := map[string]bool{}
		for _, name := range []string{"{shared}", "a{b}c", "}{", "line\nbreak", "order-7", "ünï", "x:grant"} {
			lock, err := holder.TryAcquire(ctx, name, fencing.WithTTL(30*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			type result struct {
				lock *fencing.Lock
				err  error
				at   time.Time
			}
			done := make(chan result, 1)
			wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			go func() {
				lock, err := waiter.Acquire(wctx, name)
				done <- result{lock, err, time.Now()}
			}()
			channel := keyBase(t, name) + "grant"
			owner := cl.NodeFor(lockKey(t, name))
			waitUntil(t, 10*time.Second, "the waiter's shard subscription", func() bool {
				n, err := grantSubscribers(ctx, owner, channel, true)
				return err == nil && n == 1
			})
			waitUntil(t, 10*time.Second, "the waiter in the queue", func() bool {
				return owner.Do(ctx, "LLEN", keyBase(t, name)+"queue").Val() == int64(1)
			})
			released := time.Now()
			if err := lock.Release(ctx); err != nil {
				t.Fatal(err)
			}
			r := <-done
			cancel()
			if r.err != nil {
				t.Fatalf("%q: waiter: %v", name, r.err)
			}
			if r.lock.Token() != lock.Token()+1 {
				t.Errorf("%q: granted token %d, want %d", name, r.lock.Token(), lock.Token()+1)
			}
			latency := r.at.Sub(released)
			if latency > 500*time.Millisecond {
				t.Errorf("%q: the waiter took %v after the release: not woken by the announcement", name, latency)
			}
			if err := r.lock.Release(ctx); err != nil {
				t.Errorf("%q: release of the granted lock: %v", name, err)
			}
			nodes[owner.Addr()] = true
			figure(t, "cluster-grant", "resource %q: granted on %s and announced by SPUBLISH; waiter returned %v after the release", name, owner.Addr(), latency.Round(time.Millisecond))
		}
		if len(nodes) < 2 {
			t.Errorf("all resources on %v: the names did not span primaries", nodes)
		}
	})

	t.Run("do-renews", func(t *testing.T) {
		var renewals atomic.Int32
		hl := newLocker(t, cc, fencing.WithHooks(observe.Hooks{End: func(_ context.Context, e observe.Event) {
			if e.Op == observe.OpRenew && e.Outcome == observe.OutcomeOK {
				renewals.Add(1)
			}
		}}))
		err := hl.Do(ctx, "{job}", func(ctx context.Context) error {
			deadline := time.Now().Add(10 * time.Second)
			for renewals.Load() < 3 && ctx.Err() == nil && time.Now().Before(deadline) {
				select {
				case <-ctx.Done():
				case <-time.After(20 * time.Millisecond):
				}
			}
			return ctx.Err()
		}, fencing.WithTTL(3*time.Second)) // a renewal a second: no loaded machine delays one past the lease
		if err != nil || renewals.Load() < 3 {
			t.Fatalf("Do on the cluster: %v after %d renewals", err, renewals.Load())
		}
	})

	t.Run("with-replicas", func(t *testing.T) {
		begin := time.Now()
		_, err := l.TryAcquire(ctx, "{rep}", fencing.WithReplicas(1, 100*time.Millisecond))
		if !errors.Is(err, fencing.ErrNotReplicated) {
			t.Fatalf("WithReplicas on primaries without replicas: got %v, want ErrNotReplicated", err)
		}
		node := cl.NodeFor(lockKey(top, "{rep}"))
		if n := node.Do(ctx, "EXISTS", lockKey(top, "{rep}")).Val(); n != int64(0) {
			t.Fatal("the unreplicated lock is still held")
		}
		if v := node.Do(ctx, "GET", fenceKey(top, "{rep}")).Val(); v != "1" {
			t.Fatalf("fence counter %v, want 1: the script did not run on the key's primary", v)
		}
		figure(t, "cluster-with-replicas", "no replicas: ErrNotReplicated after %v, lock left 0", time.Since(begin).Round(time.Millisecond))
	})

	t.Run("check-server", func(t *testing.T) {
		rep, err := servercheck.Check(ctx, l)
		if err != nil || len(rep.Nodes) != 3 {
			t.Fatalf("got %v with %d nodes, want no error and 3 nodes", err, len(rep.Nodes))
		}
		victim := cl.Nodes()[1]
		do(t, victim, "CONFIG", "SET", "maxmemory-policy", "allkeys-lru")
		defer do(t, victim, "CONFIG", "SET", "maxmemory-policy", "noeviction")
		rep, err = servercheck.Check(ctx, l)
		if !errors.Is(err, servercheck.ErrUnsafe) || !strings.Contains(err.Error(), victim.Addr()) {
			t.Fatalf("one primary with allkeys-lru: got %v, want ErrUnsafeServer naming %s", err, victim.Addr())
		}
		unsafe := 0
		for _, n := range rep.Nodes {
			if n.Unsafe {
				unsafe++
			}
		}
		figure(t, "cluster-check-server", "primaries_checked=%d; one set to allkeys-lru: ErrUnsafeServer, unsafe_nodes=%d, tokens_can_regress=%v", len(rep.Nodes), unsafe, rep.TokensCanRegress)
	})
}

// nodeCounts lists keys per node in the cluster's slot order.
func nodeCounts(cl *redisproc.Cluster, counts map[string]int) string {
	parts := make([]string, 0, len(counts))
	for _, n := range cl.Nodes() {
		parts = append(parts, fmt.Sprintf("%s:%d", n.Addr(), counts[n.Addr()]))
	}
	return strings.Join(parts, ",")
}
