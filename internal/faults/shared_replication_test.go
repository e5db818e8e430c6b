package faults_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/internal/testkit/redisproc"
	"github.com/fencekit/fencekit/internal/wire"
)

// TestSharedWithReplicas checks WithReplicas for shared acquisitions against a real primary
// and replica. With the replica live, a shared TryAcquire beside another reader, and a shared
// grant from the queue (after a writer's release), are acknowledged and the replica's lock
// hash holds the new reader's field. With the replica stopped (SIGSTOP), a shared TryAcquire
// fails with ErrNotReplicated after about the timeout and takes its field back out of the
// hash, leaving the other reader's (its token is used up); a shared waiter granted the lock
// fails the same way and passes it on to the writer queued behind it.
func TestSharedWithReplicas(t *testing.T) {
	redisproc.Require(t)
	t.Parallel()
	const (
		liveTO    = 5 * time.Second // generous: a loaded machine can delay the acknowledgement
		stoppedTO = 300 * time.Millisecond
	)
	p := redisproc.Start(t)
	r := redisproc.Start(t, redisproc.ReplicaOf(p))
	waitReplicated(t, p, r)
	ctx := context.Background()
	primary, replica := p.Client(t), r.Client(t)
	shared := fencing.Shared()
	l := newLocker(t, primary, fencing.WithReplicas(1, liveTO))
	plain := newLocker(t, primary)

	// A shared TryAcquire beside another reader.
	other := mustTry(t, plain, "res", shared)
	begin := time.Now()
	lock := mustTry(t, l, "res", shared)
	live := time.Since(begin)
	if !hashHolds(ctx, replica, lockKey(t, "res"), lock.Token()) || !hashHolds(ctx, replica, lockKey(t, "res"), other.Token()) {
		t.Fatalf("the replica holds %v, want both readers' fields (tokens %d and %d)", replica.HGetAll(ctx, lockKey(t, "res")).Val(), other.Token(), lock.Token())
	}

	r.Pause()
	begin = time.Now()
	lost, err := l.TryAcquire(ctx, "res", shared, fencing.WithReplicas(1, stoppedTO))
	stopped := time.Since(begin)
	if !errors.Is(err, fencing.ErrNotReplicated) || errors.Is(err, fencing.ErrNotAcquired) {
		t.Fatalf("a shared TryAcquire with the replica stopped: got %v, %v; want ErrNotReplicated", lost, err)
	}
	if stopped < stoppedTO-20*time.Millisecond || stopped > stoppedTO+2*time.Second {
		t.Errorf("failed after %v, want about the %v timeout", stopped, stoppedTO)
	}
	want := []string{strconv.FormatInt(other.Token(), 10), strconv.FormatInt(lock.Token(), 10)}
	if have := holderTokens(t, primary, lockKey(t, "res")); !slices.Equal(have, want) {
		t.Errorf("the primary's lock holds %v after the unreplicated acquisition, want %v (the two readers)", have, want)
	}
	if n := fence(t, primary, "res"); n != lock.Token()+1 {
		t.Errorf("counter %d, want %d: the unreplicated acquisition used its token", n, lock.Token()+1)
	}
	for _, k := range []*fencing.Lock{lock, other} {
		if err := k.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}

	// A shared grant from the queue: confirmed with WAIT on the waiter's connection.
	r.Resume()
	waitReplicated(t, p, r)
	writer := mustTry(t, plain, "grant")
	got := sharedGrant(ctx, l, "grant", shared)
	waitUntil(t, 10*time.Second, "the reader in the queue", func() bool { return primary.LLen(ctx, keyBase(t, "grant")+"queue").Val() == 1 })
	if err := writer.Release(ctx); err != nil {
		t.Fatal(err)
	}
	g := <-got
	if g.err != nil {
		t.Fatalf("the granted reader: %v", g.err)
	}
	if g.lock.Token() != writer.Token()+1 || !hashHolds(ctx, replica, lockKey(t, "grant"), g.lock.Token()) {
		t.Fatalf("granted token %d, the replica holds %v; want token %d there", g.lock.Token(), replica.HGetAll(ctx, lockKey(t, "grant")).Val(), writer.Token()+1)
	}
	if err := g.lock.Release(ctx); err != nil {
		t.Fatal(err)
	}

	// The same grant with the replica stopped: passed on to the writer behind.
	writer = mustTry(t, plain, "grant-stopped")
	got = sharedGrant(ctx, l, "grant-stopped", shared, fencing.WithReplicas(1, stoppedTO))
	waitUntil(t, 10*time.Second, "the reader in the queue", func() bool {
		return primary.LLen(ctx, keyBase(t, "grant-stopped")+"queue").Val() == 1
	})
	next := sharedGrant(ctx, newLocker(t, primary), "grant-stopped")
	waitUntil(t, 10*time.Second, "the writer behind it", func() bool {
		return primary.LLen(ctx, keyBase(t, "grant-stopped")+"queue").Val() == 2
	})
	r.Pause()
	defer r.Resume()
	if err := writer.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if g := <-got; !errors.Is(g.err, fencing.ErrNotReplicated) || errors.Is(g.err, fencing.ErrNotAcquired) {
		t.Fatalf("a shared grant with the replica stopped: got %v, %v; want ErrNotReplicated", g.lock, g.err)
	}
	n := <-next
	if n.err != nil {
		t.Fatalf("the writer behind: %v", n.err)
	}
	if n.lock.Token() != writer.Token()+2 {
		t.Errorf("the writer behind got token %d, want %d (the unreplicated grant used %d)", n.lock.Token(), writer.Token()+2, writer.Token()+1)
	}
	if err := n.lock.Release(ctx); err != nil {
		t.Fatal(err)
	}
	figure(t, "shared-with-replicas", "%s: live replica: shared acquisition beside a reader acknowledged in %v, its field on the replica; a shared grant confirmed and on the replica; stopped replica (timeout %v): shared TryAcquire ErrNotReplicated after %v, its field taken out (the other reader's kept), a shared grant ErrNotReplicated and passed on to the writer behind",
		serverName(t, p), live.Round(100*time.Microsecond), stoppedTO, stopped.Round(time.Millisecond))
}

// sharedGrant starts l.Acquire of resource with opts and returns a channel of its result.
func sharedGrant(ctx context.Context, l *fencing.Locker, resource string, opts ...fencing.CallOption) <-chan acquiredLock {
	ch := make(chan acquiredLock, 1)
	go func() {
		actx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		lock, err := l.Acquire(actx, resource, opts...)
		ch <- acquiredLock{lock, err}
	}()
	return ch
}

// acquiredLock is the result of an Acquire.
type acquiredLock struct {
	lock *fencing.Lock
	err  error
}

// hashHolds reports whether the lock hash key on client has a holder field with token.
func hashHolds(ctx context.Context, client redis.UniversalClient, key string, token int64) bool {
	_, holders, _ := wire.HashHolders(client.HGetAll(ctx, key).Val())
	return slices.ContainsFunc(holders, func(h wire.Holder) bool { return h.Token == token })
}
