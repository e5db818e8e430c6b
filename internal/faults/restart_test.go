package faults_test

import (
	"cmp"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/internal/testkit/redisproc"
)

// TestRestartWithAOF kills Redis with SIGKILL and restarts it, again and again, with the
// append-only file on. With appendfsync always, the fence counter and a held lock survive
// every crash, so tokens keep increasing. With everysec the losses are only measured: a
// process crash loses nothing that reached write(2), but while a background fsync is slow
// (a busy disk) Redis postpones the write(2) for up to 2 s and still answers the clients,
// so a crash then loses acknowledged acquisitions (redis.log says "Asynchronous AOF fsync
// is taking too long").
func TestRestartWithAOF(t *testing.T) {
	redisproc.Require(t)
	t.Parallel()
	const restarts = 8
	for _, fsync := range []string{"always", "everysec"} {
		t.Run(fsync, func(t *testing.T) {
			s := redisproc.Start(t, redisproc.Args("--appendonly", "yes", "--appendfsync", fsync))
			l := newLocker(t, s.Client(t), fencing.WithTTL(2*time.Second))
			ctx := context.Background()
			last := acquireRelease(t, l, "res", 3)
			strict := fsync == "always"
			report := t.Errorf
			if !strict {
				report = t.Logf
			}
			regressions, heldSurvived := 0, 0
			for i := range restarts {
				heldName := "held-" + strconv.Itoa(i)
				held, err := l.TryAcquire(ctx, heldName, fencing.WithTTL(time.Minute))
				if err != nil {
					t.Fatalf("restart %d: acquire held: %v", i, err)
				}
				s.Kill()
				s.Restart()
				if _, err := l.TryAcquire(ctx, heldName); errors.Is(err, fencing.ErrNotAcquired) {
					heldSurvived++
				} else {
					report("appendfsync %s, restart %d: a held lock did not survive the crash: %v", fsync, i, err)
				}
				_ = held.Release(ctx)
				// A lost release leaves "res" held until its TTL: wait for it.
				actx, cancel := context.WithTimeout(ctx, 10*time.Second)
				lock, err := l.Acquire(actx, "res")
				cancel()
				if err != nil {
					t.Fatalf("appendfsync %s, restart %d: acquire: %v", fsync, i, err)
				}
				if lock.Token() <= last {
					regressions++
					report("appendfsync %s, restart %d: token %d after %d", fsync, i, lock.Token(), last)
				}
				last = lock.Token()
				_ = lock.Release(ctx)
				last = max(last, acquireRelease(t, l, "res", 2))
			}
			logText, _ := os.ReadFile(filepath.Join(s.Dir(), "redis.log"))
			slow := strings.Count(string(logText), "Asynchronous AOF fsync is taking too long")
			figure(t, "restart-aof-"+fsync, "kill -9 restarts=%d regressions=%d held_lock_survived=%d/%d last_token=%d slow_fsync_log_lines=%d", restarts, regressions, heldSurvived, restarts, last, slow)
		})
	}
}

// TestRestartWhileWaiting kills Redis (SIGKILL, AOF on with appendfsync always) while four
// waiters of two Lockers wait, on clients with go-redis's default options, and starts it again
// 5 s later. go-redis's own retries ride out about 2 s of refused connections; for the rest
// the waiters' checks with Redis fail, and the waiters go on waiting (see Locker.Acquire).
// Their places in the queue lapse after 3 s without a check (the queue and waiter keys
// expire), so each Locker puts its waiters back in their order: once the holder releases, all
// are served, each Locker's in the order they queued, with tokens above the holder's.
func TestRestartWhileWaiting(t *testing.T) {
	redisproc.Require(t)
	t.Parallel()
	const waiters = 4
	s := redisproc.Start(t, redisproc.Args("--appendonly", "yes", "--appendfsync", "always"))
	ctx := context.Background()
	holder := newLocker(t, s.Client(t))
	lockers := []*fencing.Locker{newLocker(t, s.Client(t)), newLocker(t, s.Client(t))}
	held, err := holder.TryAcquire(ctx, "res")
	if err != nil {
		t.Fatal(err)
	}
	queue := keyBase(t, "res") + "queue"
	var store fencedStore
	store.write("holder", held.Token())
	type served struct {
		pos   int
		token int64
		err   error
	}
	order := make(chan served, waiters)
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for i := range waiters {
		go func() {
			lock, err := lockers[i%2].Acquire(wctx, "res")
			if err != nil {
				order <- served{i, 0, err}
				return
			}
			if !store.write(strconv.Itoa(i), lock.Token()) {
				t.Errorf("waiter %d: the fenced store rejected token %d", i, lock.Token())
			}
			order <- served{i, lock.Token(), lock.Release(ctx)}
		}()
		waitUntil(t, 5*time.Second, "the waiter in the queue", func() bool {
			return s.Do(ctx, "LLEN", queue).Val() == int64(i+1)
		})
	}
	killed := time.Now()
	s.Kill()
	time.Sleep(5 * time.Second)
	s.Restart()
	down := time.Since(killed)
	waitUntil(t, 5*time.Second, "the waiters back in the queue", func() bool {
		return s.Do(ctx, "LLEN", queue).Val() == int64(waiters) || len(order) > 0
	})
	if len(order) > 0 {
		w := <-order
		t.Fatalf("waiter %d: the wait ended while Redis was down: %v", w.pos, w.err)
	}
	if err := held.Release(ctx); err != nil {
		t.Fatalf("holder: release after the restart: %v", err)
	}
	all := make([]served, 0, waiters)
	for range waiters {
		w := <-order
		if w.err != nil {
			t.Fatalf("waiter %d: %v", w.pos, w.err)
		}
		all = append(all, w)
	}
	// The waiters report after their release, so the channel's order is not theirs: the
	// tokens, which each acquisition increases, are.
	slices.SortFunc(all, func(a, b served) int { return cmp.Compare(a.token, b.token) })
	last, lastOf := held.Token(), []int{-1, -1}
	var got []int
	for _, w := range all {
		if w.pos < lastOf[w.pos%2] || w.token <= last {
			t.Errorf("served waiter %d with token %d after waiter %d of its Locker and token %d; want its Locker's order and a higher token", w.pos, w.token, lastOf[w.pos%2], last)
		}
		last, lastOf[w.pos%2] = w.token, w.pos
		got = append(got, w.pos)
	}
	if store.rejected != 0 || store.dupAccepted != 0 {
		t.Errorf("fenced store: %d stale writes rejected, %d accepted with a used token; want 0", store.rejected, store.dupAccepted)
	}
	figure(t, "restart-while-waiting", "waiters=%d lockers=2 down_until_restarted=%v served=%v last_token=%d stale_writes=0", waiters, down.Round(time.Millisecond), got, last)
}

// TestRestartWithoutPersistence shows the counter going back when Redis restarts empty, or
// from an older RDB snapshot, and WithServerTimeFloor keeping tokens increasing through both.
func TestRestartWithoutPersistence(t *testing.T) {
	redisproc.Require(t)
	t.Parallel()
	cases := []struct {
		name     string
		snapshot bool // SAVE after the first acquisitions: the restart loads that snapshot
	}{
		{"empty", false},
		{"older-snapshot", true},
	}
	for _, tc := range cases {
		for _, floor := range []bool{false, true} {
			name := tc.name
			var opts []fencing.Option
			if floor {
				name += "-time-floor"
				opts = append(opts, fencing.WithServerTimeFloor())
			}
			t.Run(name, func(t *testing.T) {
				s := redisproc.Start(t) // --save "" --appendonly no
				l := newLocker(t, s.Client(t), opts...)
				before := acquireRelease(t, l, "res", 4)
				if tc.snapshot {
					do(t, s, "SAVE")
					before = acquireRelease(t, l, "res", 4)
				}
				s.Kill()
				s.Restart()
				lock, err := l.TryAcquire(context.Background(), "res")
				if err != nil {
					t.Fatal(err)
				}
				after := lock.Token()
				_ = lock.Release(context.Background())
				regressed := after <= before
				switch {
				case floor && regressed:
					t.Fatalf("with the time floor: token %d after %d", after, before)
				case !floor && !tc.snapshot && after != 1:
					t.Fatalf("without persistence: got token %d after the restart, want the regression to 1", after)
				case !floor && tc.snapshot && after != 5:
					t.Fatalf("from the snapshot: got token %d after the restart, want the regression to 5", after)
				}
				figure(t, "restart-"+name, "last_token_before=%d first_token_after=%d regressed=%v", before, after, regressed)
			})
		}
	}
}
