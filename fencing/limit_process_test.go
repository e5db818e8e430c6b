//go:build unix

package fencing_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/internal/testkit/redisproc"
	"github.com/fencekit/fencekit/internal/testkit/redistest"
)

// enterScript records a holder entering its section: it adds the holder to the sorted set
// KEYS[1] with the end of its lease as its score (ARGV[2], Unix milliseconds by the child's
// clock, which is the server's: both run on this host), drops the holders whose lease ended
// (the new one too, when a process stopped after it read its lease resumes past it), and
// counts an instant over the limit ARGV[3] in KEYS[2]; KEYS[3] counts the sections. A holder
// that was killed or stopped stays in the set until its lease ends, as it does in the
// resource's slots, and no longer.
var enterScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[1], tonumber(ARGV[2]), ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('INCR', KEYS[3])
if redis.call('ZCARD', KEYS[1]) > tonumber(ARGV[3]) then
  return redis.call('INCR', KEYS[2])
end
return 0
`)

// childLimit sizes TestLimitProcesses.
const (
	childLimit      = 3
	childProcesses  = 8
	childGoroutines = 4
	childTTL        = time.Second
)

// TestLimitProcesses runs 8 processes of 4 goroutines on one resource of limit 3, on Redis and
// on a three-primary Cluster (skipped without redis-server), each
// section recorded in Redis with its lease (enterScript), and SIGSTOPs one process and
// SIGKILLs another while they may hold slots and have waiters queued: no instant has more
// than 3 holders whose lease is valid, and the others keep making progress, also after the
// stopped process resumes.
func TestLimitProcesses(t *testing.T) {
	t.Parallel()
	if env := os.Getenv("FENCEKIT_CHILD_LIMIT"); env != "" {
		childLimitHolder(env)
		return
	}
	t.Run("redis", func(t *testing.T) {
		r := redistest.New(t)
		if r.Mini != nil {
			// The leases of the killed and the stopped holders must run out, and a miniredis
			// moves its clock only when told to (the scripts read a hash's time from its TTL).
			t.Skip("needs a server whose clock moves; runs with FENCING_REDIS_ADDR")
		}
		limitProcesses(t, r.Client, r.Addr, r.DB, r.Prefix)
	})
	t.Run("cluster", func(t *testing.T) {
		redisproc.Require(t)
		cl := redisproc.StartCluster(t, 3)
		limitProcesses(t, cl.Client(t), strings.Join(cl.Addrs(), "+"), 0, "fktest:limit-processes:")
	})
}

// limitProcesses runs TestLimitProcesses on the server (or the Cluster, addrs joined by
// '+') that client reaches.
func limitProcesses(t *testing.T, client redis.UniversalClient, addrs string, db int, prefix string) {
	ctx := t.Context()
	over, sections := prefix+"{check}:over", prefix+"{check}:sections"
	children := make([]*exec.Cmd, childProcesses)
	outs := make([]*bytes.Buffer, childProcesses)
	for i := range children {
		c := exec.Command(os.Args[0], "-test.run=^TestLimitProcesses$")
		c.Env = append(os.Environ(), "FENCEKIT_CHILD_LIMIT="+strings.Join([]string{addrs, strconv.Itoa(db), prefix}, ","))
		outs[i] = &bytes.Buffer{}
		c.Stdout, c.Stderr = outs[i], outs[i]
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		children[i] = c
		defer func() {
			_ = c.Process.Signal(syscall.SIGCONT)
			_ = c.Process.Kill()
			_ = c.Wait()
		}()
	}
	count := func() int64 { n, _ := client.Get(ctx, sections).Int64(); return n }
	progress := func(what string, more int64) {
		t.Helper()
		from := count()
		waitFor(t, 30*time.Second, what, func() bool { return count() >= from+more })
	}
	progress("sections from every process", 100)
	stopped, killed := children[0], children[1]
	if err := stopped.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	if err := killed.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = killed.Wait()
	progress("sections with one process stopped and one killed", 100)
	if err := stopped.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	progress("sections after the stopped process resumed", 100)
	for _, c := range children {
		_ = c.Process.Signal(syscall.SIGCONT)
		_ = c.Process.Kill()
		_ = c.Wait() // its output is complete only then
	}
	n, _ := client.Get(ctx, over).Int64()
	if n != 0 {
		t.Errorf("%d sections began with more than %d holders of a valid lease", n, childLimit)
	}
	t.Logf("FIGURE limit-processes: %d sections, %d over the limit of %d", count(), n, childLimit)
	if t.Failed() {
		for i, out := range outs {
			t.Logf("child %d:\n%s", i, out)
		}
	}
}

// childLimitHolder is a child of TestLimitProcesses: its goroutines take slots, record their
// sections and release them until the process is killed.
func childLimitHolder(env string) {
	parts := strings.Split(env, ",")
	if len(parts) != 3 {
		os.Exit(2)
	}
	db, _ := strconv.Atoi(parts[1])
	prefix := parts[2]
	var c redis.UniversalClient = redis.NewClient(&redis.Options{Addr: parts[0], DB: db})
	if addrs := strings.Split(parts[0], "+"); len(addrs) > 1 {
		c = redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	}
	l := fencing.New(c, fencing.WithPrefix(prefix), fencing.WithLimit(childLimit), fencing.WithTTL(childTTL))
	keys := []string{prefix + "{check}:inside", prefix + "{check}:over", prefix + "{check}:sections"}
	ctx := context.Background()
	for range childGoroutines {
		go func() {
			for {
				lock, err := l.Acquire(ctx, "res")
				if err != nil {
					fmt.Println("Acquire:", err)
					time.Sleep(10 * time.Millisecond)
					continue
				}
				sent := time.Now()
				ttl, err := lock.TTL(ctx)
				if err == nil {
					member := strconv.FormatInt(lock.Token(), 10)
					// The lease ends at least ttl after the TTL call was sent, whenever the
					// section begins (a stopped process may begin it long after).
					ends := sent.Add(ttl - time.Millisecond).UnixMilli()
					if n, err := enterScript.Run(ctx, c, keys, member, ends, childLimit).Int64(); err != nil || n > 0 {
						fmt.Println("enter:", n, err)
					}
					time.Sleep(20 * time.Millisecond) // the section
					c.ZRem(ctx, keys[0], member)
				}
				_ = lock.Release(ctx)
			}
		}()
	}
	select {}
}

// TestLimitKilledWaiter queues a waiter of a child process and a local one behind two
// holders of limit 2, kills the child and frees a slot: the dead waiter is skipped (or its
// grant lapses) and the local waiter gets the slot, while the other holder keeps its own.
func TestLimitKilledWaiter(t *testing.T) {
	t.Parallel()
	if env := os.Getenv("FENCEKIT_CHILD_LIMIT_WAITER"); env != "" {
		parts := strings.Split(env, ",")
		db, _ := strconv.Atoi(parts[1])
		c := redis.NewClient(&redis.Options{Addr: parts[0], DB: db})
		l := fencing.New(c, fencing.WithPrefix(parts[2]), fencing.WithLimit(2))
		_, err := l.Acquire(context.Background(), "res")
		fmt.Println("child acquired:", err)
		select {}
	}
	r := redistest.New(t)
	ctx := t.Context()
	limit := fencing.WithLimit(2)
	holder, local := process(t, r, limit), process(t, r, limit)
	one := mustAcquire(t, holder, "res", fencing.WithTTL(time.Hour))
	two := mustAcquire(t, holder, "res", fencing.WithTTL(time.Hour))
	child := exec.Command(os.Args[0], "-test.run=^TestLimitKilledWaiter$")
	child.Env = append(os.Environ(), "FENCEKIT_CHILD_LIMIT_WAITER="+strings.Join([]string{r.Addr, strconv.Itoa(r.DB), r.Prefix}, ","))
	var out bytes.Buffer
	child.Stdout, child.Stderr = &out, &out
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = child.Process.Kill(); _ = child.Wait() }()
	waitFor(t, 10*time.Second, "the child in the queue", func() bool { return queueLen(r, "res") == 1 })
	got := acquireAsync(ctx, local, "res", limit)
	waitFor(t, 5*time.Second, "the local waiter behind it", func() bool { return queueLen(r, "res") == 2 })
	if err := child.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = child.Wait()
	released := time.Now()
	if err := one.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if r.Mini != nil {
		r.Advance(3 * time.Second) // a grant to the dead child lapses; miniredis TTLs only so
	}
	var a acquired
	select {
	case a = <-got:
	case <-time.After(15 * time.Second):
		t.Fatalf("local waiter still waiting; child output:\n%s", out.String())
	}
	if a.err != nil {
		t.Fatal(a.err)
	}
	t.Logf("FIGURE limit-killed-waiter: next waiter served %v after the release, token %d", time.Since(released).Round(time.Millisecond), a.lock.Token())
	if _, err := two.TTL(ctx); err != nil {
		t.Errorf("the other holder lost its slot: %v", err)
	}
	for _, lock := range []*fencing.Lock{two, a.lock} {
		if err := lock.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}
