package faults_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/internal/testkit/redisproc"
	"github.com/fencekit/fencekit/servercheck"
)

var policies = []string{"noeviction", "allkeys-lru", "allkeys-lfu", "allkeys-random", "volatile-lru", "volatile-lfu", "volatile-random", "volatile-ttl"}

// TestCheckServerSettings runs CheckServer on a real server under every eviction policy
// and every persistence mode.
func TestCheckServerSettings(t *testing.T) {
	redisproc.Require(t)
	t.Parallel()
	s := redisproc.Start(t)
	l := newLocker(t, s.Client(t))
	ctx := context.Background()
	for _, p := range policies {
		do(t, s, "CONFIG", "SET", "maxmemory-policy", p)
		rep, err := servercheck.Check(ctx, l)
		unsafe := strings.HasPrefix(p, "allkeys-")
		if errors.Is(err, servercheck.ErrUnsafe) != unsafe || (!unsafe && err != nil) {
			t.Errorf("%s: got %v, want ErrUnsafeServer %v", p, err, unsafe)
		}
		if len(rep.Nodes) != 1 || rep.Nodes[0].EvictionPolicy != p || rep.Nodes[0].Addr != s.Addr() {
			t.Errorf("%s: got nodes %+v", p, rep.Nodes)
			continue
		}
		figure(t, "check-server-policy", "%-15s refused=%v tokens_can_regress=%v warnings=%d", p, unsafe, rep.TokensCanRegress, len(rep.Warnings))
	}
	do(t, s, "CONFIG", "SET", "maxmemory-policy", "noeviction")
	steps := []struct {
		set     []string
		want    string
		regress bool
	}{
		{nil, "none", true},
		{[]string{"save", "3600 1 300 100"}, "rdb", true},
		{[]string{"appendonly", "yes", "appendfsync", "no"}, "aof-no", true},
		{[]string{"appendfsync", "everysec"}, "aof-everysec", true},
		{[]string{"appendfsync", "always"}, "aof-always", false},
	}
	for _, step := range steps {
		if step.set != nil {
			do(t, s, append([]any{"CONFIG", "SET"}, toAny(step.set)...)...)
		}
		rep, err := servercheck.Check(ctx, l)
		if err != nil {
			t.Fatalf("%s: %v", step.want, err)
		}
		n := rep.Nodes[0]
		if n.Persistence != step.want || rep.TokensCanRegress != step.regress || n.Replicas != 0 || n.Role != "master" {
			t.Errorf("%v: got persistence %q regress %v replicas %d role %q, want %q %v 0 master; warnings %q",
				step.set, n.Persistence, rep.TokensCanRegress, n.Replicas, n.Role, step.want, step.regress, rep.Warnings)
		}
		figure(t, "check-server-persistence", "%-12s tokens_can_regress=%v warnings=%q", n.Persistence, rep.TokensCanRegress, rep.Warnings)
	}
	rep, err := servercheck.Check(ctx, newLocker(t, s.Client(t), fencing.WithServerTimeFloor()))
	if err != nil || rep.TokensCanRegress {
		t.Errorf("with the time floor: %v, regress %v", err, rep.TokensCanRegress)
	}
}

func toAny(s []string) []any {
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
}

// TestCheckServerACL runs CheckServer as ACL users without CONFIG: with +info it reads
// INFO instead (and still refuses allkeys-*); with neither it returns a clear error that
// names the missing permissions and wraps Redis's NOPERM, while the minimal user can still
// take locks.
func TestCheckServerACL(t *testing.T) {
	redisproc.Require(t)
	t.Parallel()
	s := redisproc.Start(t)
	do(t, s, "ACL", "SETUSER", "noconfig", "on", ">pw", "~*", "&*", "+@all", "-config")
	do(t, s, "ACL", "SETUSER", "locker", "on", ">pw", "resetkeys", "~fk:*", "resetchannels", "&fk:*", "-@all",
		"+hello", "+ping", "+eval", "+evalsha", "+subscribe", "+unsubscribe", "+rpushx", "+lrem",
		"+get", "+set", "+incr", "+del", "+rename", "+pexpire", "+pttl", "+exists", "+lpop", "+lpush", "+rpush", "+lpos", "+lrange", "+lindex", "+append", "+publish", "+time",
		"+hmget", "+hset", "+hdel", "+hlen", "+hgetall", "+type")
	as := func(user string) *redis.Client {
		return s.Client(t, func(o *redis.Options) { o.Username, o.Password = user, "pw" })
	}
	ctx := context.Background()

	rep, err := servercheck.Check(ctx, newLocker(t, as("noconfig")))
	if err != nil || rep.Nodes[0].Persistence != "no-aof" || rep.Nodes[0].EvictionPolicy != "noeviction" {
		t.Fatalf("without CONFIG: got %v, %+v", err, rep.Nodes)
	}
	if !slices.ContainsFunc(rep.Warnings, func(w string) bool { return strings.Contains(w, "CONFIG GET failed") }) {
		t.Errorf("without CONFIG: no warning about it in %q", rep.Warnings)
	}
	figure(t, "check-server-acl-no-config", "read from INFO: policy=%s persistence=%s tokens_can_regress=%v warnings=%d", rep.Nodes[0].EvictionPolicy, rep.Nodes[0].Persistence, rep.TokensCanRegress, len(rep.Warnings))
	do(t, s, "CONFIG", "SET", "maxmemory-policy", "allkeys-lfu")
	if _, err := servercheck.Check(ctx, newLocker(t, as("noconfig"))); !errors.Is(err, servercheck.ErrUnsafe) {
		t.Errorf("without CONFIG, allkeys-lfu: got %v, want ErrUnsafeServer", err)
	}
	do(t, s, "CONFIG", "SET", "maxmemory-policy", "noeviction")

	minimal := newLocker(t, as("locker"))
	_, checkErr := servercheck.Check(ctx, minimal)
	var reply redis.Error
	if checkErr == nil || errors.Is(checkErr, servercheck.ErrUnsafe) || !strings.Contains(checkErr.Error(), "+config|get or +info") || !errors.As(checkErr, &reply) || !strings.Contains(checkErr.Error(), "NOPERM") {
		t.Fatalf("minimal user: got %v, want an error naming +config|get or +info and wrapping NOPERM", checkErr)
	}
	if lock, err := minimal.TryAcquire(ctx, "res"); err != nil {
		t.Fatalf("minimal user cannot lock: %v", err)
	} else if err := lock.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// Waiting: queueing, the grant, its announcement, and a cancelled waiter leaving.
	held, err := minimal.TryAcquire(ctx, "queued", fencing.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	other := newLocker(t, as("locker"))
	cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = other.Acquire(cctx, "queued")
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("minimal user, cancelled waiter: got %v, want the deadline", err)
	}
	granted := make(chan error, 1)
	go func() {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		lock, err := other.Acquire(wctx, "queued")
		if err == nil {
			err = lock.Release(ctx)
		}
		granted <- err
	}()
	waitUntil(t, 5*time.Second, "the waiter in the queue", func() bool { return s.Do(ctx, "LLEN", keyBase(t, "queued")+"queue").Val() == int64(1) })
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-granted; err != nil {
		t.Fatalf("minimal user, granted waiter: %v", err)
	}
	// Shared and limited holders, a writer queued behind readers (a waiter for a slot behind
	// full slots) and granted; Extend, TTL, Inspect and ForceRelease.
	for _, kind := range []struct {
		name       string
		opts, wait []fencing.CallOption // the holders' and the waiter's
	}{
		{"shared", []fencing.CallOption{fencing.Shared()}, nil},
		{"limit 2", []fencing.CallOption{fencing.WithLimit(2)}, []fencing.CallOption{fencing.WithLimit(2)}},
	} {
		resource := "kinds-" + strings.ReplaceAll(kind.name, " ", "")
		holders := make([]*fencing.Lock, 2)
		for i := range holders {
			var err error
			if holders[i], err = minimal.TryAcquire(ctx, resource, kind.opts...); err != nil {
				t.Fatalf("minimal user, %s: %v", kind.name, err)
			}
		}
		if err := holders[0].Extend(ctx, time.Minute); err != nil {
			t.Fatalf("minimal user, %s Extend: %v", kind.name, err)
		}
		if _, err := holders[0].TTL(ctx); err != nil {
			t.Fatalf("minimal user, %s TTL: %v", kind.name, err)
		}
		queued := make(chan error, 1)
		go func() {
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			lock, err := other.Acquire(wctx, resource, kind.wait...)
			if err == nil {
				err = lock.Release(ctx)
			}
			queued <- err
		}()
		waitUntil(t, 5*time.Second, "the waiter behind "+kind.name+" holders", func() bool {
			st, err := minimal.Inspect(ctx, resource)
			return err == nil && len(st.Waiters) == 1
		})
		if err := minimal.ForceRelease(ctx, resource, holders[0].Token()); err != nil {
			t.Fatalf("minimal user, %s ForceRelease: %v", kind.name, err)
		}
		if err := holders[1].Release(ctx); err != nil {
			t.Fatalf("minimal user, %s Release: %v", kind.name, err)
		}
		if err := <-queued; err != nil {
			t.Fatalf("minimal user, the waiter behind %s holders: %v", kind.name, err)
		}
	}
	figure(t, "check-server-acl-minimal", "error (not ErrUnsafeServer): %q; locking, waiting, Shared, WithLimit, Inspect and ForceRelease still work", firstLine(checkErr))
}

// TestCheckServerReplication checks the replica-related verdicts on a primary with a
// replica (and appendfsync always, to isolate them) and on the replica itself.
func TestCheckServerReplication(t *testing.T) {
	redisproc.Require(t)
	t.Parallel()
	p := redisproc.Start(t, redisproc.Args("--appendonly", "yes", "--appendfsync", "always"))
	r := redisproc.Start(t, redisproc.ReplicaOf(p))
	ctx := context.Background()
	cases := []struct {
		name    string
		opts    []fencing.Option
		regress bool
	}{
		{"async", nil, true},
		{"with-replicas", []fencing.Option{fencing.WithReplicas(1, time.Second)}, false},
		{"time-floor", []fencing.Option{fencing.WithServerTimeFloor()}, false},
	}
	for _, tc := range cases {
		rep, err := servercheck.Check(ctx, newLocker(t, p.Client(t), tc.opts...))
		if err != nil || rep.Nodes[0].Replicas != 1 || rep.TokensCanRegress != tc.regress {
			t.Errorf("%s: got %v, replicas %d, regress %v; want 1 replica, regress %v (%q)", tc.name, err, rep.Nodes[0].Replicas, rep.TokensCanRegress, tc.regress, rep.Warnings)
		}
		figure(t, "check-server-replication", "%-13s replicas=%d tokens_can_regress=%v warnings=%d", tc.name, rep.Nodes[0].Replicas, rep.TokensCanRegress, len(rep.Warnings))
	}
	rep, err := servercheck.Check(ctx, newLocker(t, r.Client(t)))
	if err != nil || rep.Nodes[0].Role != "slave" || !slices.ContainsFunc(rep.Warnings, func(w string) bool { return strings.Contains(w, "READONLY") }) {
		t.Errorf("on the replica: got %v, %+v", err, rep)
	}
}

// TestEvictionMatrix fills memory under several maxmemory policies with a fence counter
// (no TTL) and a held lock (TTL 10 min) in place, and records what survives and what the
// next acquisition gets. CheckServer refuses the allkeys-* policies beforehand.
func TestEvictionMatrix(t *testing.T) {
	redisproc.Require(t)
	t.Parallel()
	for _, policy := range []string{"noeviction", "allkeys-lru", "allkeys-random", "volatile-lru", "volatile-ttl"} {
		t.Run(policy, func(t *testing.T) {
			s := redisproc.Start(t, redisproc.Args("--maxmemory-policy", policy))
			c := s.Client(t)
			l := newLocker(t, c)
			ctx := context.Background()
			_, checkErr := servercheck.Check(ctx, l)
			if errors.Is(checkErr, servercheck.ErrUnsafe) != strings.HasPrefix(policy, "allkeys-") {
				t.Errorf("CheckServer: %v", checkErr)
			}
			last := acquireRelease(t, l, "res", 5)
			if _, err := l.TryAcquire(ctx, "held", fencing.WithTTL(10*time.Minute)); err != nil {
				t.Fatal(err)
			}
			used, _ := strconv.ParseInt(info(t, s, "memory")["used_memory"], 10, 64)
			do(t, s, "CONFIG", "SET", "maxmemory", strconv.FormatInt(used+(2<<20), 10))
			written, oom := fill(t, c, 6000)
			fenceKept := c.Exists(ctx, fenceKey(t, "res")).Val() == 1
			lockKept := c.Exists(ctx, lockKey(t, "held")).Val() == 1
			next := "OOM"
			lock, err := l.TryAcquire(ctx, "res")
			switch {
			case err == nil:
				next = strconv.FormatInt(lock.Token(), 10)
				if lock.Token() <= last {
					next += " (regressed)"
				}
			case !mentions(err, "OOM"):
				t.Fatalf("next acquisition: %v", err)
			}
			switch {
			case policy == "noeviction" && (!fenceKept || !lockKept || strings.Contains(next, "regressed")):
				// Redis 7.0 and Valkey 8 refuse the next acquisition (OOM); Redis 7.4.1 runs it
				// and issues the next token. Either is safe; a regressed token is not.
				t.Errorf("noeviction: fence kept %v, lock kept %v, next %s; want true, true, and OOM or a higher token", fenceKept, lockKept, next)
			case strings.HasPrefix(policy, "volatile-") && (!fenceKept || lockKept):
				t.Errorf("%s: fence kept %v, lock kept %v; want the counter kept and the lock (the only key with a TTL) evicted", policy, fenceKept, lockKept)
			}
			figure(t, "eviction-matrix", "%-15s refused_by_check=%v filled=%dKiB oom=%v fence_counter_kept=%v held_lock_kept=%v next_token=%s (last %d)",
				policy, errors.Is(checkErr, servercheck.ErrUnsafe), written, oom, fenceKept, lockKept, next, last)
		})
	}
}
