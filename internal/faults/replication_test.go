package faults_test

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/internal/testkit/redisproc"
)

// waitReplicated waits until replica has an up link, has processed everything primary
// had when called, and primary has its acknowledgement of that (slave0 online with that
// offset, after a write of its own). Unlike Server.WaitSynced, it checks the primary's side
// too: right after a full sync the command stream may not flow for up to a second (until
// the replica's periodic REPLCONF ACK), and WAIT then returns 0. It also works through a
// linkProxy.
func waitReplicated(t *testing.T, primary, replica *redisproc.Server) {
	t.Helper()
	// A write moves the offset, so that an acknowledgement of it proves the command stream
	// and the acknowledgements both flow; right after a sync, offset 0 proves nothing.
	do(t, primary, "INCR", "fk:replication-probe")
	target, err := strconv.ParseInt(info(t, primary, "replication")["master_repl_offset"], 10, 64)
	if err != nil {
		t.Fatalf("master_repl_offset: %v", err)
	}
	waitUntil(t, 10*time.Second, "the replica to catch up and acknowledge", func() bool {
		f := info(t, replica, "replication")
		off, err := strconv.ParseInt(f["slave_repl_offset"], 10, 64)
		if f["master_link_status"] != "up" || err != nil || off < target {
			return false
		}
		var state string
		var acked int64 = -1
		for _, kv := range strings.Split(info(t, primary, "replication")["slave0"], ",") {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case "state":
				state = v
			case "offset":
				acked, _ = strconv.ParseInt(v, 10, 64)
			}
		}
		return state == "online" && acked >= target
	})
}

// TestWithReplicas checks WithReplicas against a real primary and replica: with the
// replica live, acquisitions are acknowledged and present on the replica; with the replica
// paused (SIGSTOP), an acquisition fails with ErrNotReplicated after about the timeout and
// leaves no lock behind, whether it came from TryAcquire, Acquire or Do.
func TestWithReplicas(t *testing.T) {
	redisproc.Require(t)
	t.Parallel()
	const timeout = 300 * time.Millisecond
	p := redisproc.Start(t)
	r := redisproc.Start(t, redisproc.ReplicaOf(p))
	waitReplicated(t, p, r)
	l := newLocker(t, p.Client(t), fencing.WithReplicas(1, timeout))
	ctx := context.Background()

	begin := time.Now()
	// A generous timeout for the live case: a loaded machine can delay the acknowledgement.
	lock, err := l.TryAcquire(ctx, "res", fencing.WithReplicas(1, 2*time.Second))
	live := time.Since(begin)
	if err != nil {
		t.Fatalf("live replica: %v", err)
	}
	// WAIT returned 1: the replica has processed the acquisition already.
	if v, err := r.Do(ctx, "GET", lockKey(t, "res")).Text(); err != nil || v == "" {
		t.Fatalf("the acknowledged lock is not on the replica: %q, %v", v, err)
	}
	if err := lock.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// The pipelined EVALSHA+WAIT falls back to EVAL after SCRIPT FLUSH.
	do(t, p, "SCRIPT", "FLUSH")
	if _, err := l.TryAcquire(ctx, "flushed", fencing.WithReplicas(1, 2*time.Second)); err != nil {
		t.Fatalf("after SCRIPT FLUSH: %v", err)
	}

	r.Pause()
	defer r.Resume()
	type result struct {
		name    string
		elapsed time.Duration
		err     error
	}
	var results []result
	called := false
	for _, op := range []struct {
		name string
		run  func(resource string) error
	}{
		{"TryAcquire", func(res string) error { _, err := l.TryAcquire(ctx, res); return err }},
		{"Acquire", func(res string) error {
			actx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			_, err := l.Acquire(actx, res)
			return err
		}},
		{"Do", func(res string) error {
			return l.Do(ctx, res, func(context.Context) error { called = true; return nil })
		}},
	} {
		resource := "paused-" + op.name
		begin := time.Now()
		err := op.run(resource)
		elapsed := time.Since(begin)
		results = append(results, result{op.name, elapsed, err})
		if !errors.Is(err, fencing.ErrNotReplicated) || errors.Is(err, fencing.ErrNotAcquired) {
			t.Fatalf("%s with the replica paused: got %v, want ErrNotReplicated", op.name, err)
		}
		if elapsed < timeout-20*time.Millisecond || elapsed > timeout+2*time.Second {
			t.Errorf("%s failed after %v, want about the %v timeout", op.name, elapsed, timeout)
		}
		if n := p.Do(ctx, "EXISTS", lockKey(t, resource)).Val(); n != int64(0) {
			t.Errorf("%s: the unreplicated lock is still on the primary", op.name)
		}
		if v := p.Do(ctx, "GET", fenceKey(t, resource)).Val(); v != "1" {
			t.Errorf("%s: fence counter %v, want 1 (the token is used up)", op.name, v)
		}
	}
	if called {
		t.Error("Do ran its function without the lock")
	}

	// A client whose ReadTimeout is below the WAIT timeout, which WithReplicas documents as
	// unsupported. The case needs a WAIT that cannot return before the ReadTimeout, on any
	// server: the replica is stopped (still, from above; Pause says so again), so it cannot
	// acknowledge. go-redis times out and retries the pipeline on new connections, where the
	// retried script finds its own lock and resets the lease, a write that WAIT waits for
	// again; every attempt times out, the call fails with the read timeout (not with
	// ErrNotReplicated, and never with the lock), and the lock is released.
	r.Pause()
	short := fencing.New(p.Client(t, func(o *redis.Options) { o.ReadTimeout = 100 * time.Millisecond }),
		fencing.WithPrefix(prefix(t)), fencing.WithReplicas(1, time.Second))
	defer short.Close()
	begin = time.Now()
	_, shortErr := short.TryAcquire(ctx, "short")
	shortElapsed := time.Since(begin)
	var netErr net.Error
	if !errors.As(shortErr, &netErr) || !netErr.Timeout() || errors.Is(shortErr, fencing.ErrNotAcquired) || errors.Is(shortErr, fencing.ErrNotReplicated) {
		t.Errorf("ReadTimeout below the WAIT timeout: got %v, want the read timeout", shortErr)
	}
	if n := p.Do(ctx, "EXISTS", lockKey(t, "short")).Val(); n != int64(0) {
		t.Errorf("ReadTimeout below the WAIT timeout left the lock behind")
	}

	// After SCRIPT FLUSH, the first pipeline's EVALSHA fails with NOSCRIPT but its WAIT
	// still waits, so a lagging replica costs the timeout twice.
	do(t, p, "SCRIPT", "FLUSH")
	begin = time.Now()
	_, flushErr := l.TryAcquire(ctx, "flushed-paused")
	flushElapsed := time.Since(begin)
	if !errors.Is(flushErr, fencing.ErrNotReplicated) {
		t.Errorf("after SCRIPT FLUSH with the replica paused: got %v, want ErrNotReplicated", flushErr)
	}

	r.Resume()
	p.WaitSynced(r)
	lock, err = l.TryAcquire(ctx, "paused-TryAcquire", fencing.WithReplicas(1, 2*time.Second))
	if err != nil || lock.Token() != 2 {
		t.Fatalf("after Resume: got %v, %v; want token 2", lock, err)
	}
	figure(t, "replicas-ack", "live: acquired in %v, lock on the replica; paused replica (timeout %v): TryAcquire %v, Acquire %v, Do %v -> ErrNotReplicated, locks left 0, fn called %v; after SCRIPT FLUSH: ErrNotReplicated after %v; ReadTimeout 100ms < WAIT 1s: %q after %v, lock left 0",
		live.Round(100*time.Microsecond), timeout, results[0].elapsed.Round(time.Millisecond), results[1].elapsed.Round(time.Millisecond), results[2].elapsed.Round(time.Millisecond), called, flushElapsed.Round(time.Millisecond), shortErr, shortElapsed.Round(time.Millisecond))
}

// TestFailover promotes a replica that missed the latest acquisition: the link between
// primary and replica is cut (a silent partition), A acquires on the primary, the primary
// crashes, the replica is promoted with REPLICAOF NO ONE and B acquires on it. Without
// protection, A and B hold the lock at once with the same token and the fenced store
// accepts both; with WithReplicas, A's acquisition fails; with WithServerTimeFloor, B's
// token is higher and A's late write is rejected.
func TestFailover(t *testing.T) {
	redisproc.Require(t)
	t.Parallel()
	const rounds = 3
	modes := []struct {
		name  string
		a, b  []fencing.Option
		check func(t *testing.T, errA error, tokA, tokB int64)
	}{
		{"async", nil, nil, func(t *testing.T, errA error, tokA, tokB int64) {
			if errA != nil || tokA != tokB {
				t.Errorf("got %v and tokens %d, %d; want the hazard: the same token twice", errA, tokA, tokB)
			}
		}},
		{"with-replicas", []fencing.Option{fencing.WithReplicas(1, 200*time.Millisecond)}, nil, func(t *testing.T, errA error, _, _ int64) {
			if !errors.Is(errA, fencing.ErrNotReplicated) {
				t.Errorf("A: got %v, want ErrNotReplicated", errA)
			}
		}},
		{"time-floor", []fencing.Option{fencing.WithServerTimeFloor()}, []fencing.Option{fencing.WithServerTimeFloor()}, func(t *testing.T, errA error, tokA, tokB int64) {
			if errA != nil || tokB <= tokA {
				t.Errorf("got %v and tokens A %d, B %d; want B above A", errA, tokA, tokB)
			}
		}},
	}
	for _, mode := range modes {
		t.Run(mode.name, func(t *testing.T) {
			var store fencedStore
			var dupTokens, doubleHolders, aFailed, lateAccepted, lateRejected int
			for round := range rounds {
				ctx := context.Background()
				p := redisproc.Start(t)
				link := newLinkProxy(t, p.Addr())
				r := redisproc.Start(t)
				do(t, r, "REPLICAOF", "127.0.0.1", link.Port())
				waitReplicated(t, p, r)
				la := newLocker(t, p.Client(t), mode.a...)
				lb := newLocker(t, r.Client(t), mode.b...)
				// Warm up without WithReplicas: under load a WAIT can miss a short timeout,
				// and only the acquisition after the cut is under test.
				acquireRelease(t, la, "res", 3, fencing.WithReplicas(0, 0))
				waitReplicated(t, p, r)

				link.Cut()
				lockA, errA := la.TryAcquire(ctx, "res", fencing.WithTTL(30*time.Second))
				if errA == nil {
					store.write("A", lockA.Token())
				} else {
					aFailed++
				}
				p.Kill()
				r.Promote()
				lockB, errB := lb.TryAcquire(ctx, "res", fencing.WithTTL(30*time.Second))
				if errB != nil {
					t.Fatalf("round %d: B on the promoted replica: %v", round, errB)
				}
				if !store.write("B", lockB.Token()) {
					t.Errorf("round %d: B's write with token %d was rejected", round, lockB.Token())
				}
				if errA == nil {
					// A's lease (30 s) is still valid by its own clock: two holders.
					doubleHolders++
					if lockA.Token() == lockB.Token() {
						dupTokens++
					}
					if store.write("A", lockA.Token()) {
						lateAccepted++
					} else {
						lateRejected++
					}
				}
				mode.check(t, errA, lockA.Token(), lockB.Token())
			}
			figure(t, "failover-"+mode.name, "rounds=%d a_failed_not_replicated=%d double_holders=%d duplicate_tokens=%d store_accepted_same_token_twice=%d late_writes_accepted=%d late_writes_rejected=%d",
				rounds, aFailed, doubleHolders, dupTokens, store.dupAccepted, lateAccepted, lateRejected)
			if mode.name != "async" && (lateAccepted != 0 || store.dupAccepted != 0) {
				t.Errorf("%s: the store accepted %d late and %d same-token writes, want 0", mode.name, lateAccepted, store.dupAccepted)
			}
		})
	}
}

// TestWithReplicasGrant checks a WithReplicas waiter that is granted the lock from the queue
// by another Locker's release: before Acquire returns, it resets the lease and WAITs on its own
// connection, which covers the grant too, so the replica holds the granted lock value. With the
// replica paused, the waiter fails with ErrNotReplicated and passes the lock on to the next
// waiter.
func TestWithReplicasGrant(t *testing.T) {
	redisproc.Require(t)
	t.Parallel()
	p := redisproc.Start(t)
	r := redisproc.Start(t, redisproc.ReplicaOf(p))
	waitReplicated(t, p, r)
	ctx := context.Background()
	holder := newLocker(t, p.Client(t))
	waiter := newLocker(t, p.Client(t), fencing.WithReplicas(1, 2*time.Second))
	type result struct {
		lock *fencing.Lock
		err  error
	}
	acquire := func(l *fencing.Locker, resource string, opts ...fencing.CallOption) <-chan result {
		ch := make(chan result, 1)
		go func() {
			actx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			lock, err := l.Acquire(actx, resource, opts...)
			ch <- result{lock, err}
		}()
		return ch
	}
	queued := func(resource string, n int64) {
		waitUntil(t, 10*time.Second, "waiters in the queue", func() bool {
			return p.Do(ctx, "LLEN", keyBase(t, resource)+"queue").Val() == n
		})
	}

	held, err := holder.TryAcquire(ctx, "res")
	if err != nil {
		t.Fatal(err)
	}
	got := acquire(waiter, "res")
	queued("res", 1)
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	a := <-got
	if a.err != nil {
		t.Fatalf("granted WithReplicas waiter: %v", a.err)
	}
	v, err := r.Do(ctx, "GET", lockKey(t, "res")).Text()
	if err != nil || !strings.HasSuffix(strings.TrimSuffix(v, "+"), ":"+strconv.FormatInt(a.lock.Token(), 10)) {
		t.Fatalf("the replica holds %q (%v), want the granted lock with token %d", v, err, a.lock.Token())
	}
	_ = a.lock.Release(ctx)

	held, err = holder.TryAcquire(ctx, "paused")
	if err != nil {
		t.Fatal(err)
	}
	got = acquire(waiter, "paused", fencing.WithReplicas(1, 300*time.Millisecond))
	queued("paused", 1)
	next := acquire(newLocker(t, p.Client(t)), "paused")
	queued("paused", 2)
	r.Pause()
	defer r.Resume()
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if a := <-got; !errors.Is(a.err, fencing.ErrNotReplicated) || errors.Is(a.err, fencing.ErrNotAcquired) {
		t.Fatalf("granted with the replica paused: got %v, %v; want ErrNotReplicated", a.lock, a.err)
	}
	n := <-next
	if n.err != nil {
		t.Fatalf("next waiter: %v", n.err)
	}
	if n.lock.Token() != held.Token()+2 {
		t.Errorf("next waiter's token %d, want %d (the unreplicated grant used %d)", n.lock.Token(), held.Token()+2, held.Token()+1)
	}
	_ = n.lock.Release(ctx)
}
