package faults_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/fencing/observe"
	"github.com/fencekit/fencekit/internal/testkit/redisproc"
)

// TestScriptFlush empties the script cache between every call, and again and again while
// Do renews its lease: every call falls back from EVALSHA to EVAL and works.
func TestScriptFlush(t *testing.T) {
	redisproc.Require(t)
	t.Parallel()
	s := redisproc.Start(t)
	var renewals atomic.Int32
	l := newLocker(t, s.Client(t), fencing.WithHooks(observe.Hooks{End: func(_ context.Context, e observe.Event) {
		if e.Op == observe.OpRenew && e.Outcome == observe.OutcomeOK {
			renewals.Add(1)
		}
	}}))
	ctx := context.Background()
	ok, total := 0, 0
	step := func(name string, err error) {
		total++
		if err != nil {
			t.Errorf("%s after SCRIPT FLUSH: %v", name, err)
			return
		}
		ok++
		do(t, s, "SCRIPT", "FLUSH")
	}
	do(t, s, "SCRIPT", "FLUSH")
	lock, err := l.TryAcquire(ctx, "res")
	step("TryAcquire", err)
	step("Extend", lock.Extend(ctx, time.Minute))
	_, err = lock.TTL(ctx)
	step("TTL", err)
	step("Release", lock.Release(ctx))
	err = l.Do(ctx, "res", func(ctx context.Context) error {
		deadline := time.Now().Add(10 * time.Second)
		for renewals.Load() < 3 && ctx.Err() == nil && time.Now().Before(deadline) {
			do(t, s, "SCRIPT", "FLUSH")
			time.Sleep(10 * time.Millisecond) // pace the flushes between renewals
		}
		return ctx.Err()
	}, fencing.WithTTL(3*time.Second)) // a renewal a second: no loaded machine delays one past the lease
	step("Do (renewals after flushes)", err)
	if renewals.Load() < 3 {
		t.Errorf("got %d renewals, want 3", renewals.Load())
	}
	figure(t, "script-flush", "calls_ok_after_flush=%d/%d renewals_after_flush=%d", ok, total, renewals.Load())
}

// TestClientPause runs acquisitions while the server is paused for writes: an
// acquisition blocks until the pause ends, then succeeds; one whose context is shorter
// fails with an error matching ErrNotAcquired and the context's error, and leaves no lock.
func TestClientPause(t *testing.T) {
	redisproc.Require(t)
	t.Parallel()
	const pause = 600 * time.Millisecond
	s := redisproc.Start(t)
	l := newLocker(t, s.Client(t, func(o *redis.Options) { o.ContextTimeoutEnabled = true }))

	do(t, s, "CLIENT", "PAUSE", strconv.Itoa(int(pause/time.Millisecond)), "WRITE")
	paused := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	lock, err := l.TryAcquire(ctx, "res")
	cancel()
	blocked := time.Since(paused)
	if err != nil {
		t.Fatalf("acquisition during CLIENT PAUSE: %v", err)
	}
	if blocked < pause-100*time.Millisecond {
		t.Errorf("the acquisition returned after %v, before the %v pause ended", blocked, pause)
	}
	_ = lock.Release(context.Background())

	do(t, s, "CLIENT", "PAUSE", strconv.Itoa(int(pause/time.Millisecond)), "WRITE")
	paused = time.Now()
	ctx, cancel = context.WithTimeout(context.Background(), 150*time.Millisecond)
	_, err = l.TryAcquire(ctx, "short")
	cancel()
	returned := time.Since(paused)
	if !errors.Is(err, fencing.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("short context during CLIENT PAUSE: got %v, want ErrNotAcquired and DeadlineExceeded", err)
	}
	waitUntil(t, 5*time.Second, "the pause to end", func() bool { return time.Since(paused) > pause })
	if n := s.Do(context.Background(), "EXISTS", lockKey(t, "short")).Val(); n != int64(0) {
		t.Errorf("the abandoned acquisition left a lock behind")
	}
	figure(t, "client-pause", "pause=%v acquire_blocked=%v then acquired; ctx=150ms: ErrNotAcquired+DeadlineExceeded returned after %v, orphan_locks=0",
		pause, blocked.Round(time.Millisecond), returned.Round(time.Millisecond))
}

// TestBusyScript runs our acquisitions while another client's script loops past
// busy-reply-threshold: a single attempt fails at once with Redis's BUSY error, which does not
// match ErrNotAcquired; a waiting Acquire rides it out, as it rides out a restart, and takes
// the lock once SCRIPT KILL has ended the script.
func TestBusyScript(t *testing.T) {
	redisproc.Require(t)
	t.Parallel()
	s := redisproc.Start(t)
	busyReplies := &countBusy{}
	c := s.Client(t)
	c.AddHook(busyReplies)
	l := newLocker(t, c)
	do(t, s, "CONFIG", "SET", "busy-reply-threshold", "100")
	looper := s.Client(t, func(o *redis.Options) { o.ReadTimeout = 20 * time.Second; o.MaxRetries = -1 })
	var wg sync.WaitGroup
	var loopErr error
	wg.Add(1)
	go func() { defer wg.Done(); loopErr = looper.Eval(context.Background(), "while true do end", nil).Err() }()
	defer wg.Wait()
	killed := false
	defer func() {
		if !killed {
			_ = s.Do(context.Background(), "SCRIPT", "KILL").Err()
		}
	}()
	waitUntil(t, 5*time.Second, "BUSY replies", func() bool {
		return mentions(s.Do(context.Background(), "GET", "x").Err(), "BUSY")
	})

	begin := time.Now()
	_, tryErr := l.TryAcquire(context.Background(), "res")
	tryElapsed := time.Since(begin)
	if !mentions(tryErr, "BUSY") || errors.Is(tryErr, fencing.ErrNotAcquired) {
		t.Errorf("TryAcquire during a busy script: got %v, want a BUSY error that is not ErrNotAcquired", tryErr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	seen := busyReplies.n.Load()
	waited := make(chan error, 1)
	var lock *fencing.Lock
	go func() {
		var err error
		lock, err = l.Acquire(ctx, "res")
		waited <- err
	}()
	waitUntil(t, 10*time.Second, "Acquire to meet BUSY", func() bool { return busyReplies.n.Load() > seen })
	do(t, s, "SCRIPT", "KILL")
	killed = true
	wg.Wait()
	if !mentions(loopErr, "killed") {
		t.Errorf("the looping script ended with %v, want killed", loopErr)
	}
	if err := <-waited; err != nil || lock.Token() != 1 {
		t.Fatalf("Acquire through the busy script: got %v, %v; want token 1 once it was killed", lock, err)
	}
	figure(t, "busy-script", "TryAcquire: %q after %v; Acquire: rode out %d BUSY replies, then acquired token %d after SCRIPT KILL",
		firstLine(tryErr), tryElapsed.Round(time.Millisecond), busyReplies.n.Load()-seen, lock.Token())
}

// countBusy is a go-redis hook that counts BUSY error replies.
type countBusy struct{ n atomic.Int64 }

func (c *countBusy) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *countBusy) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if mentions(err, "BUSY") {
			c.n.Add(1)
		}
		return err
	}
}

func (c *countBusy) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func firstLine(err error) string {
	if err == nil {
		return "<nil>"
	}
	s, _, _ := strings.Cut(err.Error(), "\n")
	return s
}

// TestOOMNoEviction fills memory under maxmemory-policy noeviction: a new acquisition
// fails with Redis's OOM error, not ErrNotAcquired, and leaves neither a lock nor a moved
// counter; a held lock can still be released, and reports busy correctly until then.
func TestOOMNoEviction(t *testing.T) {
	redisproc.Require(t)
	t.Parallel()
	s := redisproc.Start(t, redisproc.Args("--maxmemory-policy", "noeviction"))
	c := s.Client(t)
	l := newLocker(t, c)
	ctx := context.Background()
	acquireRelease(t, l, "new", 2) // the counter exists: an OOM must not move it
	held, err := l.TryAcquire(ctx, "held", fencing.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	used, _ := strconv.ParseInt(info(t, s, "memory")["used_memory"], 10, 64)
	do(t, s, "CONFIG", "SET", "maxmemory", strconv.FormatInt(used+(2<<20), 10))
	written, _ := fill(t, c, 6000)
	// Memory now hovers at the limit: a rejected pipeline's query buffer pushed it over,
	// and it fell back under once the buffer was freed. Pin it just over the limit.
	used, _ = strconv.ParseInt(info(t, s, "memory")["used_memory"], 10, 64)
	do(t, s, "CONFIG", "SET", "maxmemory", strconv.FormatInt(used-(64<<10), 10))
	if err := c.Set(ctx, "probe", "x", 0).Err(); !mentions(err, "OOM") {
		t.Fatalf("after filling %d keys: SET got %v, want OOM", written, err)
	}

	_, newErr := l.TryAcquire(ctx, "new")
	if !mentions(newErr, "OOM") || errors.Is(newErr, fencing.ErrNotAcquired) {
		t.Fatalf("acquisition under OOM: got %v, want an OOM error that is not ErrNotAcquired", newErr)
	}
	if n := c.Exists(ctx, lockKey(t, "new")).Val(); n != 0 {
		t.Error("a lock exists without its acquisition succeeding")
	}
	if v := c.Get(ctx, fenceKey(t, "new")).Val(); v != "2" {
		t.Errorf("the counter moved under OOM: %s, want 2", v)
	}
	_, busyErr := l.TryAcquire(ctx, "held")
	if !errors.Is(busyErr, fencing.ErrNotAcquired) {
		t.Errorf("busy resource under OOM: got %v, want ErrNotAcquired", busyErr)
	}
	extendErr := held.Extend(ctx, time.Minute)
	if err := held.Release(ctx); err != nil {
		t.Fatalf("release under OOM: %v", err)
	}
	_, afterErr := l.TryAcquire(ctx, "held")
	if !mentions(afterErr, "OOM") {
		t.Errorf("acquisition of the released resource under OOM: got %v, want OOM", afterErr)
	}
	figure(t, "oom-noeviction", "filled=%d KiB; acquire: %q (not ErrNotAcquired), orphan_locks=0, counter_moved=no; busy resource: ErrNotAcquired; extend: %v; release: ok",
		written, firstLine(newErr), errString(extendErr))
}

func errString(err error) string {
	if err == nil {
		return "ok"
	}
	return fmt.Sprintf("%q", firstLine(err))
}

// fill writes 1 KiB keys in batches of 50 until a batch meets OOM and a lone SET after it
// does too, or until n keys are written (under an eviction policy, or when memory hovers
// at the limit). It returns the number of keys written and whether writes fail with OOM.
func fill(t *testing.T, c *redis.Client, n int) (written int, oom bool) {
	t.Helper()
	ctx := context.Background()
	value := strings.Repeat("x", 1024)
	for written < n {
		pipe := c.Pipeline()
		for i := range 50 {
			pipe.Set(ctx, "fill:"+strconv.Itoa(written+i), value, 0)
		}
		_, err := pipe.Exec(ctx)
		written += 50
		if err != nil && !mentions(err, "OOM") {
			t.Fatalf("fill: %v", err)
		}
		if err != nil && mentions(c.Set(ctx, "fill:probe", "x", 0).Err(), "OOM") {
			return written, true
		}
	}
	return written, false
}
