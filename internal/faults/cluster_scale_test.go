package faults_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/internal/testkit/redisproc"
)

// The TestClusterScale tests run Lockers on a *redis.ClusterClient against a local Redis
// Cluster and make them wait on many resources at once, through the faults a Cluster goes
// through: pub/sub connections killed, a slot migrated, a primary restarted, a failover.
// Each follows the same steps (see clusterWait): a holder Locker takes every resource with
// a known lease; waiter Lockers (processes) queue on them in a known order; the fault is
// injected while they wait; the holder releases; every waiter must then be served, each
// before the lease that it waited behind would have run out by itself (so it was woken by
// an announcement or a poll, not by an expiry), never two in a critical section at once,
// with tokens that increase per resource, and a fenced store per resource that rejects no
// write as stale.

// TestClusterScaleWaiters makes one Locker wait on 300 resources at once, three waiters
// each, queued in a known order. The Locker holds at most one pub/sub connection per
// primary (CLIENT LIST TYPE pubsub on every node, sampled from the first waiter until the
// last is served), and each resource's waiters are served first come, first served.
func TestClusterScaleWaiters(t *testing.T) {
	redisproc.Require(t)
	t.Parallel()
	const resources, perResource = 300, 3
	cl := redisproc.StartCluster(t, 3)
	names := resourceNames("res-%03d", resources)
	w := newClusterWait(t, cl, names, 1, time.Minute, nil)
	sampler := startPubSubSampler(t, cl, lockerName(0))
	w.holdAll()
	w.enqueue(perResource)
	queued := pubSubConns(t, cl, lockerName(0))
	w.release(names)
	w.finish()
	peak, most := sampler.stop()

	primaries := len(cl.Nodes())
	if queued.total == 0 {
		t.Errorf("no pub/sub connection while %d waiters waited: the Locker does not subscribe", resources*perResource)
	}
	if peak.total > primaries || most > 1 {
		t.Errorf("pub/sub connections of one Locker waiting on %d resources: %d at the peak (per node %s), up to %d on one node; want at most %d, one per primary",
			resources, peak.total, peak.perNode, most, primaries)
	}
	unordered := w.checkFIFO()
	w.checkBeforeLease()
	figure(t, "cluster-scale-waiters", "primaries=%d resources=%d waiters=%d pubsub_conns_queued=%d (%s) pubsub_conns_peak=%d served=%d resources_out_of_order=%d stale_writes=%d overlaps=%d all_served_after_release=%v",
		primaries, resources, resources*perResource, queued.total, queued.perNode, peak.total, w.servedCount(), unordered, w.stale(), w.overlaps.Load(), w.serveTime().Round(time.Millisecond))
}

// TestClusterScalePubSubKill kills every pub/sub connection (CLIENT KILL TYPE pubsub on
// every node) while two Lockers wait on 30 resources and releases half of the resources
// right after; once the subscriptions are back, it kills them again and releases the other
// half. Every waiter is served before the lease it waited behind would have run out.
func TestClusterScalePubSubKill(t *testing.T) {
	redisproc.Require(t)
	t.Parallel()
	cl := redisproc.StartCluster(t, 3)
	names := resourceNames("kill-%d", 30)
	w := newClusterWait(t, cl, names, 2, 30*time.Second, nil)
	w.holdAll()
	w.enqueue(1)
	w.waitSubscribed(names, 2)
	killed := killPubSub(t, cl)
	if killed == 0 {
		t.Fatal("CLIENT KILL TYPE pubsub killed no connection: nothing was subscribed")
	}
	first, second := names[:len(names)/2], names[len(names)/2:]
	w.release(first)
	w.waitSubscribed(second, 2)
	killed += killPubSub(t, cl)
	w.release(second)
	w.finish()
	w.checkBeforeLease()
	figure(t, "cluster-scale-pubsub-kill", "resources=%d waiters=%d pubsub_conns_killed=%d served=%d all_served_after_first_release=%v stale_writes=%d overlaps=%d",
		len(names), w.waiters(), killed, w.servedCount(), w.serveTime().Round(time.Millisecond), w.stale(), w.overlaps.Load())
}

// TestClusterScaleMigrate migrates the slot of every waited-on resource to another primary
// (CLUSTER SETSLOT IMPORTING and MIGRATING, MIGRATE of the slot's keys, SETSLOT NODE on
// every primary) while two Lockers wait on them with two waiters each. All are served, and
// never two at once.
func TestClusterScaleMigrate(t *testing.T) {
	redisproc.Require(t)
	t.Parallel()
	cl := redisproc.StartCluster(t, 3)
	names := resourceNames("mig-%d", 6)
	w := newClusterWait(t, cl, names, 2, 30*time.Second, nil)
	w.holdAll()
	w.enqueue(2)
	w.waitSubscribed(names, 2)
	primaries := cl.Nodes()
	moves := make([]string, 0, len(names))
	for _, name := range names {
		key := lockKey(t, name)
		from := cl.NodeFor(key)
		to := primaries[(slices.Index(primaries, from)+1)%len(primaries)]
		cl.MigrateKey(key, to)
		if got := cl.NodeFor(key); got != to {
			t.Fatalf("%s: slot served by %s after the migration, want %s", name, got.Addr(), to.Addr())
		}
		moves = append(moves, fmt.Sprintf("%s:%d->%d", name, from.Port(), to.Port()))
	}
	followed := w.follow(names, 2)
	w.release(names)
	w.finish()
	w.checkBeforeLease()
	figure(t, "cluster-scale-migrate", "resources=%d waiters=%d moves=[%s] subscriptions_followed_after=%v served=%d all_served_after_release=%v stale_writes=%d overlaps=%d",
		len(names), w.waiters(), strings.Join(moves, " "), followed.Round(time.Millisecond), w.servedCount(), w.serveTime().Round(time.Millisecond), w.stale(), w.overlaps.Load())
}

// TestClusterScaleRestart restarts a primary (kill -9, AOF on with appendfsync always)
// while two Lockers wait on resources spread over the primaries. All are served, with
// tokens above the ones issued before the crash.
func TestClusterScaleRestart(t *testing.T) {
	redisproc.Require(t)
	t.Parallel()
	cl := redisproc.StartCluster(t, 3, redisproc.Args("--appendonly", "yes", "--appendfsync", "always"))
	names := resourceNames("rst-%d", 9)
	// A restarted primary refuses commands with CLUSTERDOWN for about 2 s, until it has
	// heard from the others (redis.log: "Cluster state changed: ok"), longer than go-redis's
	// retries with the defaults (3, within about 0.1 s): the waiters ride that out (see
	// Locker.Acquire), on clients with the default options.
	w := newClusterWait(t, cl, names, 2, 30*time.Second, nil)
	victim := cl.NodeFor(lockKey(t, names[0]))
	onVictim := 0
	for _, name := range names {
		if cl.NodeFor(lockKey(t, name)) == victim {
			onVictim++
		}
	}
	w.holdAll()
	w.enqueue(1)
	w.waitSubscribed(names, 2)
	began := time.Now()
	cl.RestartNode(victim)
	down := time.Since(began)
	w.release(names)
	w.finish()
	w.checkBeforeLease()
	figure(t, "cluster-scale-restart", "resources=%d on_restarted_primary=%d waiters=%d restart_until_cluster_ok=%v served=%d all_served_after_release=%v stale_writes=%d overlaps=%d",
		len(names), onVictim, w.waiters(), down.Round(time.Millisecond), w.servedCount(), w.serveTime().Round(time.Millisecond), w.stale(), w.overlaps.Load())
}

// TestClusterScaleFailover promotes a replica with CLUSTER FAILOVER while two Lockers wait,
// on a Cluster with one replica per primary. Every acquisition uses WithReplicas(1, ...):
// all are served, and per resource the tokens strictly increase across the failover. Then
// a Locker whose client last talked to the cluster before the failover takes the resources
// that moved, with WithReplicas: it must follow them to the new primary, with higher tokens.
func TestClusterScaleFailover(t *testing.T) {
	redisproc.Require(t)
	t.Parallel()
	cl, w, readTimeout := replicatedWait(t, "fo-%d")
	names := w.names
	ctx := context.Background()
	late := newLocker(t, cl.Client(t, readTimeout), lockerOptions(w.opts)...)
	if lock, err := late.TryAcquire(ctx, "fo-late"); err != nil { // loads the topology
		t.Fatalf("late Locker before the failover: %v", err)
	} else {
		_ = lock.Release(ctx)
	}
	old := cl.NodeFor(lockKey(t, names[0]))
	replica := cl.ReplicasOf(old)[0]
	w.holdAll()
	w.enqueue(1)
	w.waitSubscribed(names, 2)
	began := time.Now()
	cl.Failover(replica)
	took := time.Since(began)
	if got := cl.NodeFor(lockKey(t, names[0])); got != replica {
		t.Fatalf("after the failover %s is served by %s, want the promoted %s", names[0], got.Addr(), replica.Addr())
	}
	moved, followed := w.finishOn(replica)
	figure(t, "cluster-scale-failover", "resources=%d on_failed_over_primary=%d waiters=%d failover=%d->%d until_all_nodes_agree=%v subscriptions_followed_after=%v served=%d all_served_after_release=%v stale_writes=%d overlaps=%d",
		len(names), len(moved), w.waiters(), old.Port(), replica.Port(), took.Round(time.Millisecond), followed.Round(time.Millisecond), w.servedCount(), w.serveTime().Round(time.Millisecond), w.stale(), w.overlaps.Load())

	t.Run("acquire-after-failover", func(t *testing.T) {
		for _, name := range moved {
			lock, err := late.TryAcquire(ctx, name)
			if err != nil {
				t.Errorf("%s: TryAcquire with WithReplicas on a client that last saw the old primary: %v", name, err)
				continue
			}
			if last := w.lastToken(name); lock.Token() <= last {
				t.Errorf("%s: token %d after %d; want tokens that increase", name, lock.Token(), last)
			}
			if !w.stores[name].write("late", lock.Token()) {
				t.Errorf("%s: the store rejected token %d as stale", name, lock.Token())
			}
			if err := lock.Release(ctx); err != nil {
				t.Errorf("%s: Release: %v", name, err)
			}
		}
	})
}

// TestClusterScaleCrashFailover kills a primary (SIGKILL) while two Lockers wait, on a
// Cluster with one replica per primary, and lets the cluster fail over on its own: after
// cluster-node-timeout (2 s) the others mark it failed (the whole cluster answers
// CLUSTERDOWN until a replica is elected) and its replica takes over its slots. The
// waiters' checks with Redis fail meanwhile (refused connections, CLUSTERDOWN), on clients
// with go-redis's defaults but for the ReadTimeout that WithReplicas needs, and the waits go
// on. Every acquisition uses WithReplicas(1, ...), so the holder's locks and the counters are
// on the replica: all waiters are served, with tokens that strictly increase, and the
// subscriptions follow the slots to the new primary.
func TestClusterScaleCrashFailover(t *testing.T) {
	redisproc.Require(t)
	t.Parallel()
	cl, w, _ := replicatedWait(t, "crash-%d")
	names := w.names
	victim := cl.NodeFor(lockKey(t, names[0]))
	w.holdAll()
	w.enqueue(1)
	w.waitSubscribed(names, 2)
	promoted, down := cl.CrashPrimary(victim)
	w.mu.Lock()
	if len(w.errs) > 0 {
		w.t.Fatalf("%d waits ended during the failover, the first: %s", len(w.errs), w.errs[0])
	}
	w.mu.Unlock()
	moved, followed := w.finishOn(promoted)
	figure(t, "cluster-scale-crash-failover", "resources=%d on_crashed_primary=%d waiters=%d crashed=%d promoted=%d slots_without_primary=%v subscriptions_followed_after=%v served=%d all_served_after_release=%v stale_writes=%d overlaps=%d",
		len(names), len(moved), w.waiters(), victim.Port(), promoted.Port(), down.Round(time.Millisecond), followed.Round(time.Millisecond), w.servedCount(), w.serveTime().Round(time.Millisecond), w.stale(), w.overlaps.Load())
}

// replicatedWait starts a Cluster of 3 primaries with a replica each, and a run of two
// waiting Lockers on 9 resources named after format whose acquisitions all use
// WithReplicas(1, 5s). WAIT may take a while right after a replica (re)synced and on a loaded
// machine: a generous timeout, below the clients' ReadTimeout as WithReplicas requires;
// replicatedWait returns the client option that sets it, for more clients.
func replicatedWait(t *testing.T, format string) (*redisproc.Cluster, *clusterWait, func(*redis.ClusterOptions)) {
	t.Helper()
	cl := redisproc.StartCluster(t, 3, redisproc.ClusterReplicas(1))
	readTimeout := func(o *redis.ClusterOptions) { o.ReadTimeout = 10 * time.Second }
	w := newClusterWait(t, cl, resourceNames(format, 9), 2, 30*time.Second, readTimeout, fencing.WithReplicas(1, 5*time.Second))
	return cl, w, readTimeout
}

// clusterWait is one run of waiters on a Cluster (see the TestClusterScale tests).
type clusterWait struct {
	t       *testing.T
	cl      *redisproc.Cluster
	cc      *redis.ClusterClient // for the checks
	names   []string
	lease   time.Duration // of every lock in the run
	opts    []fencing.CallOption
	holder  *fencing.Locker
	lockers []*fencing.Locker // the waiting processes, each with a client of its own
	held    map[string]*fencing.Lock
	start   time.Time // before the first acquisition: every lease in the run ends after start+lease
	queued  int       // waiters per resource so far
	wg      sync.WaitGroup

	overlaps atomic.Int32 // times two waiters were inside one resource's critical section

	mu       sync.Mutex
	errs     []string
	served   map[string][]acquisition // per resource, in the order of acquisition
	stores   map[string]*fencedStore
	inside   map[string]*atomic.Int32
	released time.Time // when the holder began to release
	last     time.Time // the latest acquisition
}

// grantChannel is the shard channel on which grants of resource are announced, or the
// prefix of those channels when each waiting Locker has one of its own (see grantSubscribers).
func grantChannel(t testing.TB, resource string) string { return keyBase(t, resource) + "grant" }

// grantSubscribers returns the subscriptions that node holds to channel, a grantChannel, and
// to the channels that extend it, summed over them: shard channels on a Cluster (PUBSUB
// SHARDCHANNELS and SHARDNUMSUB), plain ones otherwise (CHANNELS and NUMSUB).
func grantSubscribers(ctx context.Context, node *redisproc.Server, channel string, cluster bool) (int64, error) {
	list, count := "CHANNELS", "NUMSUB"
	if cluster {
		list, count = "SHARDCHANNELS", "SHARDNUMSUB"
	}
	chans, err := node.Do(ctx, "PUBSUB", list, channel+"*").StringSlice()
	if err != nil || len(chans) == 0 {
		return 0, err
	}
	args := []any{"PUBSUB", count}
	for _, ch := range chans {
		args = append(args, ch)
	}
	v, err := node.Do(ctx, args...).Slice()
	if err != nil {
		return 0, err
	}
	var n int64
	for i := 1; i < len(v); i += 2 {
		k, _ := v[i].(int64)
		n += k
	}
	return n, nil
}

// lockerName is the client name of the i-th waiting Locker's connections.
func lockerName(i int) string { return "fk-locker-" + strconv.Itoa(i) }

// acquisition is one waiter served.
type acquisition struct {
	pos   int // the waiter's place in the queue, 0 first
	token int64
	at    time.Time
}

// newClusterWait returns a run on names with a holder Locker and lockers waiting Lockers,
// each on a client of its own (configured by configure, when not nil), all with lease as
// the TTL and opts on every call.
func newClusterWait(t *testing.T, cl *redisproc.Cluster, names []string, lockers int, lease time.Duration, configure func(*redis.ClusterOptions), opts ...fencing.CallOption) *clusterWait {
	t.Helper()
	opts = append([]fencing.CallOption{fencing.WithTTL(lease)}, opts...)
	w := &clusterWait{
		t: t, cl: cl, cc: cl.Client(t), names: names, lease: lease, opts: opts,
		held: map[string]*fencing.Lock{}, served: map[string][]acquisition{},
		stores: map[string]*fencedStore{}, inside: map[string]*atomic.Int32{},
	}
	// Each client names its connections, so that CLIENT LIST tells the Lockers apart.
	client := func(name string) *redis.ClusterClient {
		return cl.Client(t, func(o *redis.ClusterOptions) {
			o.ClientName = name
			if configure != nil {
				configure(o)
			}
		})
	}
	w.holder = newLocker(t, client("fk-holder"), lockerOptions(opts)...)
	for i := range lockers {
		w.lockers = append(w.lockers, newLocker(t, client(lockerName(i)), lockerOptions(opts)...))
	}
	for _, name := range names {
		w.stores[name] = &fencedStore{}
		w.inside[name] = &atomic.Int32{}
	}
	return w
}

// holdAll takes every resource with the holder.
func (w *clusterWait) holdAll() {
	w.t.Helper()
	w.start = time.Now()
	ctx := context.Background()
	for _, name := range w.names {
		lock, err := w.holder.TryAcquire(ctx, name)
		if err != nil {
			w.t.Fatalf("holder: TryAcquire %s: %v", name, err)
		}
		w.held[name] = lock
		w.stores[name].write("holder", lock.Token())
	}
}

// enqueue queues rounds waiters per resource from every waiting Locker in turn: round 0
// of Locker 0 first, then round 0 of Locker 1, and so on. Each waiter starts once the one
// before it is in the resource's queue in Redis, so the queue order is known.
func (w *clusterWait) enqueue(rounds int) {
	w.t.Helper()
	for range rounds {
		for _, l := range w.lockers {
			pos := w.queued
			w.queued++
			for _, name := range w.names {
				w.wg.Add(1)
				go w.wait(l, name, pos)
			}
			w.waitQueued(int64(w.queued))
		}
	}
}

// waitQueued waits until every resource's queue in Redis holds n elements.
func (w *clusterWait) waitQueued(n int64) {
	w.t.Helper()
	ctx := context.Background()
	waitUntil(w.t, 30*time.Second, fmt.Sprintf("%d waiters in each queue", n), func() bool {
		cmds, err := w.cc.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, name := range w.names {
				p.LLen(ctx, keyBase(w.t, name)+"queue")
			}
			return nil
		})
		if err != nil {
			return false
		}
		for _, c := range cmds {
			if c.(*redis.IntCmd).Val() != n {
				return false
			}
		}
		return true
	})
}

// waitSubscribed waits until n subscribers listen on each resource's grant channels, on the
// primary that serves it (see grantSubscribers).
func (w *clusterWait) waitSubscribed(names []string, n int64) {
	w.t.Helper()
	ctx := context.Background()
	for _, name := range names {
		channel := grantChannel(w.t, name)
		owner := w.cl.NodeFor(channel)
		waitUntil(w.t, 15*time.Second, "the subscriptions to "+channel, func() bool {
			got, err := grantSubscribers(ctx, owner, channel, true)
			return err == nil && got == n
		})
	}
}

// follow waits until each of names has n subscribers on the primary that serves it now, and
// returns how long that took: the subscriptions follow a slot that moved. It fails the test
// when they have not followed within 10s.
func (w *clusterWait) follow(names []string, n int64) time.Duration {
	w.t.Helper()
	ctx := context.Background()
	begin := time.Now()
	for _, name := range names {
		channel := grantChannel(w.t, name)
		owner := w.cl.NodeFor(channel)
		waitUntil(w.t, 10*time.Second, "the subscriptions to "+channel+" on its new primary "+owner.Addr(), func() bool {
			got, err := grantSubscribers(ctx, owner, channel, true)
			return err == nil && got == n
		})
	}
	return time.Since(begin)
}

// finishOn ends a run after a failover to node: it waits until the subscriptions to the
// resources node serves now followed them there (one per waiting Locker), releases the
// holder's locks, and checks the run (finish, checkBeforeLease). It returns those resources
// and how long the subscriptions took to follow.
func (w *clusterWait) finishOn(node *redisproc.Server) ([]string, time.Duration) {
	w.t.Helper()
	var moved []string
	for _, name := range w.names {
		if w.cl.NodeFor(lockKey(w.t, name)) == node {
			moved = append(moved, name)
		}
	}
	if len(moved) == 0 {
		w.t.Fatalf("no resource is served by the new primary %s", node.Addr())
	}
	followed := w.follow(moved, int64(len(w.lockers)))
	w.release(w.names)
	w.finish()
	w.checkBeforeLease()
	return moved, followed
}

// wait is one waiter: it takes the resource, writes to the resource's store with its token
// inside the critical section, and releases.
func (w *clusterWait) wait(l *fencing.Locker, name string, pos int) {
	defer w.wg.Done()
	ctx, cancel := context.WithDeadline(context.Background(), w.start.Add(w.lease+30*time.Second))
	defer cancel()
	lock, err := l.Acquire(ctx, name, w.opts...)
	at := time.Now()
	if err != nil {
		w.fail("waiter %d of %s: Acquire after %v: %v", pos, name, time.Since(w.start).Round(time.Millisecond), err)
		return
	}
	inside := w.inside[name]
	if inside.Add(1) > 1 {
		w.overlaps.Add(1)
	}
	if !w.stores[name].write(strconv.Itoa(pos), lock.Token()) {
		w.fail("waiter %d of %s: the store rejected token %d as stale", pos, name, lock.Token())
	}
	w.mu.Lock()
	w.served[name] = append(w.served[name], acquisition{pos: pos, token: lock.Token(), at: at})
	if at.After(w.last) {
		w.last = at
	}
	w.mu.Unlock()
	time.Sleep(2 * time.Millisecond) // the work under the lock
	inside.Add(-1)
	rctx, rcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer rcancel()
	if err := lock.Release(rctx); err != nil {
		w.fail("waiter %d of %s: Release: %v", pos, name, err)
	}
}

func (w *clusterWait) fail(format string, args ...any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.errs = append(w.errs, fmt.Sprintf(format, args...))
}

// release frees the holder's lock on each of names.
func (w *clusterWait) release(names []string) {
	w.t.Helper()
	w.mu.Lock()
	if w.released.IsZero() {
		w.released = time.Now()
	}
	w.mu.Unlock()
	ctx := context.Background()
	for _, name := range names {
		if err := w.held[name].Release(ctx); err != nil {
			w.t.Errorf("holder: Release %s: %v", name, err)
		}
	}
}

// finish waits for every waiter and checks that each was served, never two at once, with
// tokens that increase per resource and that no store rejected.
func (w *clusterWait) finish() {
	w.t.Helper()
	done := make(chan struct{})
	go func() {
		w.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(time.Until(w.start.Add(w.lease + 40*time.Second))):
		w.t.Fatalf("waiters still waiting %v after the start", time.Since(w.start).Round(time.Second))
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for i, e := range w.errs {
		if i == 10 {
			w.t.Errorf("... and %d more", len(w.errs)-i)
			break
		}
		w.t.Error(e)
	}
	for _, name := range w.names {
		served := w.served[name]
		if len(served) != w.queued {
			w.t.Errorf("%s: %d of %d waiters served", name, len(served), w.queued)
		}
		last := w.held[name].Token()
		for _, a := range served {
			if a.token <= last {
				w.t.Errorf("%s: waiter %d got token %d after %d; want tokens that increase", name, a.pos, a.token, last)
			}
			last = a.token
		}
		if s := w.stores[name]; s.rejected != 0 || s.dupAccepted != 0 {
			w.t.Errorf("%s: the fenced store rejected %d stale writes and accepted %d with a token already used; want 0", name, s.rejected, s.dupAccepted)
		}
	}
	if n := w.overlaps.Load(); n != 0 {
		w.t.Errorf("two waiters held one resource at once %d times", n)
	}
}

// checkFIFO checks that each resource's waiters were served in the order they queued, and
// returns how many resources were not.
func (w *clusterWait) checkFIFO() int {
	w.t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	bad := 0
	for _, name := range w.names {
		for i, a := range w.served[name] {
			if a.pos != i {
				if bad < 10 {
					w.t.Errorf("%s: waiter %d served %s; want first come, first served", name, a.pos, ordinal(i))
				}
				bad++
				break
			}
		}
	}
	if bad > 10 {
		w.t.Errorf("%d resources served out of order", bad)
	}
	return bad
}

// checkBeforeLease checks that every waiter was served before start+lease: every lease in
// the run began after start, so a waiter served later may have waited for one to run out.
func (w *clusterWait) checkBeforeLease() {
	w.t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	end := w.start.Add(w.lease)
	for _, name := range w.names {
		for _, a := range w.served[name] {
			if !a.at.Before(end) {
				w.t.Errorf("%s: waiter %d served %v after the start, not before the %v lease it waited behind could run out: woken by the expiry, not by an announcement or a poll",
					name, a.pos, a.at.Sub(w.start).Round(time.Millisecond), w.lease)
			}
		}
	}
}

func (w *clusterWait) waiters() int { return w.queued * len(w.names) }

// lastToken returns the token of the last waiter served on name, or the holder's.
func (w *clusterWait) lastToken(name string) int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	if s := w.served[name]; len(s) > 0 {
		return s[len(s)-1].token
	}
	return w.held[name].Token()
}

func (w *clusterWait) servedCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, s := range w.served {
		n += len(s)
	}
	return n
}

// stale returns the writes the stores rejected or accepted with a token already used.
func (w *clusterWait) stale() int {
	n := 0
	for _, s := range w.stores {
		s.mu.Lock()
		n += s.rejected + s.dupAccepted
		s.mu.Unlock()
	}
	return n
}

// serveTime is how long serving every waiter took after the holder began to release.
func (w *clusterWait) serveTime() time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.last.Sub(w.released)
}

func ordinal(i int) string {
	return strconv.Itoa(i+1) + map[int]string{1: "st", 2: "nd", 3: "rd"}[i+1]
}

// pubSubCount is a count of connections in pub/sub mode over a Cluster's nodes.
type pubSubCount struct {
	total   int
	maxNode int    // the most on one node
	perNode string // "port:count" for each node
}

// pubSubConns counts the connections in pub/sub mode on every node (CLIENT LIST TYPE
// pubsub) whose client name is name, or all of them when name is "".
func pubSubConns(t testing.TB, cl *redisproc.Cluster, name string) pubSubCount {
	t.Helper()
	c, err := countPubSub(cl, name)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func countPubSub(cl *redisproc.Cluster, name string) (pubSubCount, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var c pubSubCount
	var parts []string
	for _, node := range cl.AllNodes() {
		list, err := node.Do(ctx, "CLIENT", "LIST", "TYPE", "pubsub").Text()
		if err != nil {
			return c, fmt.Errorf("CLIENT LIST on %s: %w", node.Addr(), err)
		}
		n := 0
		for line := range strings.Lines(list) {
			if name == "" || strings.Contains(line, " name="+name+" ") {
				n++
			}
		}
		c.total += n
		c.maxNode = max(c.maxNode, n)
		parts = append(parts, fmt.Sprintf("%d:%d", node.Port(), n))
	}
	c.perNode = strings.Join(parts, ",")
	return c, nil
}

// killPubSub runs CLIENT KILL TYPE pubsub on every node and returns how many connections
// it killed.
func killPubSub(t testing.TB, cl *redisproc.Cluster) int64 {
	t.Helper()
	var killed int64
	for _, node := range cl.AllNodes() {
		killed += do(t, node, "CLIENT", "KILL", "TYPE", "pubsub").(int64)
	}
	return killed
}

// pubSubSampler samples the pub/sub connections of a client name on a Cluster until
// stopped, and keeps the peak.
type pubSubSampler struct {
	t     testing.TB
	stopc chan struct{}
	done  chan struct{}
	peak  pubSubCount // the sample with the highest total
	most  int         // the most on one node in any sample
	err   error       // the first failed sample
}

func startPubSubSampler(t testing.TB, cl *redisproc.Cluster, name string) *pubSubSampler {
	s := &pubSubSampler{t: t, stopc: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		ticker := time.NewTicker(100 * time.Millisecond)
		defer ticker.Stop()
		for {
			c, err := countPubSub(cl, name)
			if err != nil && s.err == nil {
				s.err = err
			}
			if c.total > s.peak.total {
				s.peak = c
			}
			s.most = max(s.most, c.maxNode)
			select {
			case <-s.stopc:
				return
			case <-ticker.C:
			}
		}
	}()
	return s
}

// stop ends the sampling and returns the sample with the highest total, and the most
// connections seen on one node.
func (s *pubSubSampler) stop() (peak pubSubCount, most int) {
	s.t.Helper()
	close(s.stopc)
	<-s.done
	if s.err != nil {
		s.t.Errorf("sampling pub/sub connections: %v", s.err)
	}
	return s.peak, s.most
}

// resourceNames returns n resource names made with format from 0 to n-1.
func resourceNames(format string, n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf(format, i)
	}
	return names
}
