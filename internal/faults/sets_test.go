package faults_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/internal/testkit/redisproc"
	"github.com/fencekit/fencekit/internal/testkit/redistest"
)

// TestSetOnCluster takes sets of resources on a 3-primary Cluster: in the canonical order, by
// the hash slot Redis itself computes (CLUSTER KEYSLOT of each lock key), then by name; a busy
// resource in a later slot releases the locks of the earlier slots; AcquireAll waits for it and
// takes the rest, one slot after the other.
func TestSetOnCluster(t *testing.T) {
	redisproc.Require(t)
	t.Parallel()
	cl := redisproc.StartCluster(t, 3)
	c := cl.Client(t)
	l := newLocker(t, c, fencing.WithPrefix("sets:"))
	other := newLocker(t, c, fencing.WithPrefix("sets:"))
	ctx := t.Context()
	var resources []string
	for i := range 12 {
		resources = append(resources, fmt.Sprintf("item-%d", i))
	}
	set, err := l.TryAcquireAll(ctx, resources)
	if err != nil {
		t.Fatalf("TryAcquireAll: %v", err)
	}
	locks := set.Locks()
	if len(locks) != len(resources) {
		t.Fatalf("got %d locks, want %d", len(locks), len(resources))
	}
	sorted := slices.IsSortedFunc(locks, func(a, b *fencing.Lock) int {
		sa, sb := cl.Slot("sets:{"+a.Resource()+"}:lock"), cl.Slot("sets:{"+b.Resource()+"}:lock")
		if sa != sb {
			return sa - sb
		}
		return map[bool]int{true: -1, false: 1}[a.Resource() < b.Resource()]
	})
	if !sorted {
		t.Fatal("locks not in (slot, name) order")
	}
	nodes := map[string]bool{}
	for _, k := range locks {
		nodes[cl.NodeFor("sets:{"+k.Resource()+"}:lock").Addr()] = true
		if k.Token() != 1 {
			t.Fatalf("%s: token %d, want 1", k.Resource(), k.Token())
		}
	}
	if len(nodes) < 2 {
		t.Fatalf("the set spans %d primaries, want several", len(nodes))
	}
	if err := set.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}

	// Busy: the last resource in the order is held; the earlier ones are released again.
	last := locks[len(locks)-1].Resource()
	holder, err := other.TryAcquire(ctx, last)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.TryAcquireAll(ctx, resources); !errors.Is(err, fencing.ErrNotAcquired) {
		t.Fatalf("TryAcquireAll with %s held: got %v, want ErrNotAcquired", last, err)
	} else if b := (*fencing.BusyError)(nil); !errors.As(err, &b) || b.Resource != last {
		t.Fatalf("busy resource: got %v, want %q", err, last)
	}
	for _, k := range locks[:len(locks)-1] {
		if n := c.Exists(ctx, "sets:{"+k.Resource()+"}:lock").Val(); n != 0 {
			t.Fatalf("%s left held after a busy TryAcquireAll", k.Resource())
		}
	}
	time.AfterFunc(200*time.Millisecond, func() { _ = holder.Release(context.Background()) })
	set, err = l.AcquireAll(ctx, resources, fencing.WithMaxWait(10*time.Second))
	if err != nil {
		t.Fatalf("AcquireAll: %v", err)
	}
	if tok := set.Token(last); tok != 3 {
		t.Fatalf("token of %s: %d, want 3", last, tok)
	}
	if err := set.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	noLocksLeft(t, c, "sets:")
}

// TestSetWithReplicas takes a set with WithReplicas on a primary with one replica: each
// resource on its own, each acknowledged; with a replica that cannot acknowledge (WAIT 2),
// nothing is held.
func TestSetWithReplicas(t *testing.T) {
	redisproc.Require(t)
	t.Parallel()
	p := redisproc.Start(t)
	_ = redisproc.Start(t, redisproc.ReplicaOf(p))
	c := p.Client(t)
	ctx := t.Context()
	waitUntil(t, 10*time.Second, "the replica in sync", func() bool {
		n, err := c.Do(ctx, "WAIT", 1, 100).Int64()
		return err == nil && n == 1
	})
	l := newLocker(t, c, fencing.WithPrefix("replicated:"))
	set, err := l.TryAcquireAll(ctx, []string{"b", "a"}, fencing.WithReplicas(1, time.Second))
	if err != nil {
		t.Fatalf("TryAcquireAll with 1 replica: %v", err)
	}
	if set.Token("a") != 1 || set.Token("b") != 1 {
		t.Fatalf("tokens %d %d, want 1 1", set.Token("a"), set.Token("b"))
	}
	if err := set.Release(ctx); err != nil {
		t.Fatal(err)
	}
	_, err = l.AcquireAll(ctx, []string{"b", "a"}, fencing.WithReplicas(2, 100*time.Millisecond))
	if !errors.Is(err, fencing.ErrNotReplicated) {
		t.Fatalf("AcquireAll with 2 replicas of 1: got %v, want ErrNotReplicated", err)
	}
	noLocksLeft(t, c, "replicated:")
}

// TestSetLostRepliesOnCluster loses, on a 3-primary Cluster, the reply to the multi-acquire
// script of the third slot of a set (its first slots taken already) and the reply to a
// set's release, with go-redis retrying and without: no resource is left held by nobody, and
// no token is issued twice.
func TestSetLostRepliesOnCluster(t *testing.T) {
	redisproc.Require(t)
	t.Parallel()
	cl := redisproc.StartCluster(t, 3)
	ctx := t.Context()
	admin := cl.Client(t)
	var resources []string
	for i := range 6 {
		resources = append(resources, fmt.Sprintf("lost-%d", i))
	}
	// The nth request that match accepts, counted from arming.
	nth := func(n int32, match func([]byte) bool) func([]byte) bool {
		var seen atomic.Int32
		return func(p []byte) bool { return match(p) && seen.Add(1) == n }
	}
	// One resource per slot: an EVALSHA on one resource's three keys (on a Cluster the lock
	// key declares its fence and queue keys beside it), of the acquire script (its owner,
	// lease and, for 'S' for SPUBLISH, the defaults before it; TryAcquireAll alone sends such
	// requests here) or of the release script (a lock value, its kind and 'S'): the first
	// argument, a lock value "<owner>:<token>" for a release, tells them apart.
	script := func(p []byte, release bool) bool {
		args := respArgs(p)
		return len(args) >= 9 && args[0] == "evalsha" && args[2] == "3" && strings.Contains(args[6], ":") == release
	}
	acquire := func(p []byte) bool { return script(p, false) }
	release := func(p []byte) bool { return script(p, true) }
	counter := func(res string) int64 {
		n, _ := admin.Get(ctx, "lost:{"+res+"}:fence").Int64()
		return n
	}
	for _, tc := range []struct {
		name    string
		retries int
		match   func([]byte) bool
		ok      bool // the call succeeds
	}{
		{"acquire/retried", 3, nth(3, acquire), true},
		{"acquire/not-retried", -1, nth(3, acquire), false},
		{"release/retried", 3, nth(1, release), true},
		{"release/not-retried", -1, nth(1, release), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := &redistest.ReplyDropper{Match: tc.match}
			// A ClusterClient also retries a failed command under MaxRedirects.
			c := cl.Client(t, func(o *redis.ClusterOptions) { o.Dialer, o.MaxRetries, o.MaxRedirects = d.Dial, tc.retries, tc.retries })
			l := newLocker(t, c, fencing.WithPrefix("lost:"))
			before := map[string]int64{}
			for _, res := range resources {
				before[res] = counter(res)
			}
			if strings.HasPrefix(tc.name, "release") {
				set, err := l.TryAcquireAll(ctx, resources)
				if err != nil {
					t.Fatal(err)
				}
				d.Armed.Store(true)
				if err := set.Release(ctx); err != nil {
					t.Fatalf("Release: %v, want nil: the first run released", err)
				}
			} else {
				d.Armed.Store(true)
				set, err := l.TryAcquireAll(ctx, resources)
				switch {
				case tc.ok && err != nil:
					t.Fatalf("TryAcquireAll: %v, want the set", err)
				case !tc.ok && err == nil:
					_ = set.Release(ctx)
					t.Fatal("TryAcquireAll: got the set, want the connection's error")
				case tc.ok:
					for _, res := range resources {
						if set.Token(res) != before[res]+1 || counter(res) != before[res]+1 {
							t.Fatalf("%s: token %d, counter %d, want %d: a token issued twice", res, set.Token(res), counter(res), before[res]+1)
						}
					}
					if err := set.Release(ctx); err != nil {
						t.Fatal(err)
					}
				}
			}
			if d.Dropped.Load() != 1 {
				t.Fatalf("%d replies dropped, want 1", d.Dropped.Load())
			}
			noLocksLeft(t, admin, "lost:")
		})
	}
}

// respArgs returns the bulk strings of a request as go-redis writes it, "*<n>" and then
// "$<len>" and the bytes of each argument, or nil for anything else.
func respArgs(p []byte) []string {
	lines := bytes.Split(p, []byte("\r\n"))
	if len(lines) == 0 || !bytes.HasPrefix(lines[0], []byte("*")) {
		return nil
	}
	var args []string
	for i := 2; i < len(lines); i += 2 {
		args = append(args, string(lines[i]))
	}
	return args
}
