package faults_test

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/internal/testkit/redisproc"
	"github.com/fencekit/fencekit/store"
)

// TestSharedCluster runs shared holders and writers on a three-primary Redis Cluster (the
// mixed queue across processes is TestSharedFIFOProcesses/cluster):
//
//   - exclusion: readers and writers of four Lockers through Do on two resources that live on
//     different primaries (grants announced with SPUBLISH there): no writer beside anyone,
//     readers beside each other, the lock a hash on its slot's primary while they hold, and
//     every writer's write accepted by a fenced store;
//   - WithServerTimeFloor: after the counter of a resource is deleted (a lost counter), shared
//     acquisitions, and a shared grant from the queue made by the release of a writer whose
//     Locker has no floor, take tokens above every earlier one (without the floor, the
//     control: the next token is 1);
//   - WithCounterExpiry: the same after the counter expired.
func TestSharedCluster(t *testing.T) {
	redisproc.Require(t)
	t.Parallel()
	cl := redisproc.StartCluster(t, 3)
	cc := cl.Client(t)
	ctx := context.Background()
	top := t
	shared := fencing.Shared()

	t.Run("exclusion", func(t *testing.T) {
		// Two names on different primaries.
		var names []string
		nodes := map[string]bool{}
		for i := 0; len(names) < 2 && i < 100; i++ {
			name := "acct-" + strconv.Itoa(i)
			if node := cl.NodeFor(lockKey(top, name)).Addr(); !nodes[node] {
				nodes[node] = true
				names = append(names, name)
			}
		}
		if len(names) < 2 {
			t.Fatal("no two names on different primaries")
		}
		lockers := make([]*fencing.Locker, 4)
		for i := range lockers {
			lockers[i] = newLocker(top, cc)
		}
		st := store.NewRedis(cc)
		const readers, writers = 60, 12
		for _, name := range names {
			node := cl.NodeFor(lockKey(top, name)) // NodeFor runs on the test's goroutine only
			var inside, writing, most, overlaps, hashes atomic.Int64
			var writeErrs []error
			var mu sync.Mutex
			var wg sync.WaitGroup
			begin := time.Now()
			for i := range readers + writers {
				write := i%((readers+writers)/writers) == 0
				wg.Go(func() {
					var opts []fencing.CallOption
					if !write {
						opts = append(opts, shared)
					}
					err := lockers[i%len(lockers)].Do(ctx, name, func(ctx context.Context) error {
						token, _ := fencing.TokenFromContext(ctx)
						if write {
							if writing.Add(1) != 1 || inside.Load() != 0 {
								overlaps.Add(1)
							}
							defer writing.Add(-1)
							if err := st.Write(ctx, "store:{"+name+"}", token, "w"+strconv.FormatInt(token, 10)); err != nil {
								mu.Lock()
								writeErrs = append(writeErrs, err)
								mu.Unlock()
							}
							return nil
						}
						n := inside.Add(1)
						defer inside.Add(-1)
						for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
						}
						if writing.Load() != 0 {
							overlaps.Add(1)
						}
						if node.Do(ctx, "TYPE", lockKey(top, name)).Val() == "hash" {
							hashes.Add(1)
						}
						time.Sleep(2 * time.Millisecond)
						return nil
					}, opts...)
					if err != nil {
						t.Errorf("%s: Do: %v", name, err)
					}
				})
			}
			wg.Wait()
			if overlaps.Load() != 0 {
				t.Errorf("%s: %d sections overlapped a writer's", name, overlaps.Load())
			}
			if most.Load() < 2 {
				t.Errorf("%s: at most %d readers at once, want readers beside each other", name, most.Load())
			}
			if hashes.Load() != readers {
				t.Errorf("%s: the lock was a hash on %s in %d of %d reader sections", name, node.Addr(), hashes.Load(), readers)
			}
			if len(writeErrs) > 0 {
				t.Errorf("%s: writers' writes refused: %v", name, writeErrs)
			}
			figure(t, "shared-cluster-exclusion", "%q on %s: %d readers and %d writers of 4 Lockers in %v: up to %d readers at once, writer beside anyone 0, writers' writes refused 0",
				name, node.Addr(), readers, writers, time.Since(begin).Round(time.Millisecond), most.Load())
		}
		noLocksLeft(t, cc, prefix(top))
	})

	// lostCounter checks, for readers of a Locker made with opts, that shared acquisitions
	// after the counter of resource was lost (lose deletes it or waits until it expires) take
	// tokens above every earlier one, by TryAcquire and by a grant from the queue that the
	// release of a writer (of a Locker made with writerOpts) makes.
	lostCounter := func(t *testing.T, resource string, lose func(t *testing.T, hold *fencing.Lock), writerOpts, opts []fencing.Option) {
		node := cl.NodeFor(fenceKey(top, resource))
		readerL, writerL := newLocker(top, cc, opts...), newLocker(top, cc, writerOpts...)
		serverMicros := func() int64 {
			now, err := node.Do(ctx, "TIME").StringSlice()
			if err != nil {
				t.Fatal(err)
			}
			return atoi64(now[0])*1_000_000 + atoi64(now[1])
		}
		floor := serverMicros()
		var tokens []int64
		held := []*fencing.Lock{mustTry(t, readerL, resource, shared), mustTry(t, readerL, resource, shared)}
		for _, k := range held {
			tokens = append(tokens, k.Token())
			if err := k.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
		lose(t, nil)
		if n := node.Do(ctx, "EXISTS", fenceKey(top, resource)).Val(); n != int64(0) {
			t.Fatal("the counter is still there")
		}
		after := mustTry(t, readerL, resource, shared)
		tokens = append(tokens, after.Token())
		if err := after.Release(ctx); err != nil {
			t.Fatal(err)
		}
		// A grant: a writer holds, a reader queues, the counter is lost, the writer releases.
		w := mustTry(t, writerL, resource)
		tokens = append(tokens, w.Token())
		type result struct {
			lock *fencing.Lock
			err  error
		}
		got := make(chan result, 1)
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		go func() {
			k, err := readerL.Acquire(wctx, resource, shared)
			got <- result{k, err}
		}()
		waitUntil(t, 10*time.Second, "the reader in the queue", func() bool {
			return node.Do(ctx, "LLEN", keyBase(top, resource)+"queue").Val() == int64(1)
		})
		lose(t, w)
		if n := node.Do(ctx, "EXISTS", fenceKey(top, resource)).Val(); n != int64(0) {
			t.Fatal("the counter is still there")
		}
		if err := w.Release(ctx); err != nil {
			t.Fatal(err)
		}
		g := <-got
		if g.err != nil {
			t.Fatalf("the queued reader: %v", g.err)
		}
		tokens = append(tokens, g.lock.Token())
		if err := g.lock.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if !increasing(tokens) {
			t.Errorf("tokens %v (reader, reader, counter lost, reader, writer, counter lost, granted reader): want each above every earlier one", tokens)
		}
		if tokens[0] < floor {
			t.Errorf("first token %d below the server clock %dµs", tokens[0], floor)
		}
		figure(t, "shared-cluster-"+t.Name()[len(top.Name())+1:], "%q on %s: tokens %v (2 readers, counter lost, reader, writer, counter lost under a queued reader, the reader's grant): each above the last",
			resource, node.Addr(), tokens)
	}

	t.Run("no-floor", func(t *testing.T) {
		// The control: without the floor, a lost counter starts again at 1.
		l := newLocker(top, cc)
		before := acquireRelease(t, l, "plain", 3, shared)
		node := cl.NodeFor(fenceKey(top, "plain"))
		if err := node.Do(ctx, "DEL", fenceKey(top, "plain")).Err(); err != nil {
			t.Fatal(err)
		}
		after := acquireRelease(t, l, "plain", 1, shared)
		if after != 1 {
			t.Fatalf("without the floor: token %d after %d and a lost counter, want the regression to 1", after, before)
		}
		figure(t, "shared-cluster-no-floor", "control: shared token %d after %d once the counter was deleted", after, before)
	})

	t.Run("time-floor", func(t *testing.T) {
		lostCounter(t, "floored", func(t *testing.T, _ *fencing.Lock) {
			node := cl.NodeFor(fenceKey(top, "floored"))
			if err := node.Do(ctx, "DEL", fenceKey(top, "floored")).Err(); err != nil {
				t.Fatal(err)
			}
		}, nil, []fencing.Option{fencing.WithServerTimeFloor()}) // the grant follows the reader's rules, whoever releases
	})

	t.Run("counter-expiry", func(t *testing.T) {
		const expiry = time.Second
		lostCounter(t, "expiring", func(t *testing.T, hold *fencing.Lock) {
			node := cl.NodeFor(fenceKey(top, "expiring"))
			waitUntil(t, 3*expiry, "the counter to expire", func() bool {
				if hold != nil {
					// The writer's lease is the counter's expiry: keep it (no token issued).
					if err := hold.Extend(ctx, expiry); err != nil {
						t.Fatalf("extend the writer: %v", err)
					}
				}
				return node.Do(ctx, "EXISTS", fenceKey(top, "expiring")).Val() == int64(0)
			})
		}, []fencing.Option{fencing.WithCounterExpiry(expiry), fencing.WithTTL(expiry)}, []fencing.Option{fencing.WithCounterExpiry(expiry), fencing.WithTTL(expiry)})
	})
}

// serverName returns the name and version of the server s runs, as INFO server reports them.
func serverName(t *testing.T, s *redisproc.Server) string {
	t.Helper()
	f := info(t, s, "server")
	if v := f["valkey_version"]; v != "" {
		return "valkey " + v
	}
	return "redis " + f["redis_version"]
}

// increasing reports whether tokens strictly increase.
func increasing(tokens []int64) bool {
	for i := 1; i < len(tokens); i++ {
		if tokens[i] <= tokens[i-1] {
			return false
		}
	}
	return true
}
