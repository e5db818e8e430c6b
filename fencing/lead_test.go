package fencing_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/fencing/observe"
	"github.com/fencekit/fencekit/internal/testkit/redistest"
	"github.com/fencekit/fencekit/store"
)

// leadAsync runs Lead in a goroutine and returns its result.
func leadAsync(ctx context.Context, l *fencing.Locker, name string, fn func(context.Context) error, opts ...fencing.CallOption) <-chan error {
	done := make(chan error, 1)
	go func() { done <- l.Lead(ctx, name, fn, opts...) }()
	return done
}

func recv[T any](t *testing.T, c <-chan T, d time.Duration, what string) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(d):
		t.Fatalf("timed out after %v waiting for %s", d, what)
	}
	var zero T
	return zero
}

func waitErr(t *testing.T, done <-chan error, d time.Duration) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(d):
		t.Fatalf("Lead did not return within %v", d)
	}
	return nil
}

func TestLeadBadInput(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	l := newLocker(t, r)
	closed := newLocker(t, r)
	_ = closed.Close()
	fn := func(context.Context) error {
		t.Error("fn ran")
		return nil
	}
	for _, tc := range []struct {
		name   string
		l      *fencing.Locker
		leader string
		fn     func(context.Context) error
		opts   []fencing.CallOption
		want   error
	}{
		{"empty name", l, "", fn, nil, fencing.ErrInvalid},
		{"nil fn", l, "leader", nil, nil, fencing.ErrInvalid},
		{"bad ttl", l, "leader", fn, []fencing.CallOption{fencing.WithTTL(-time.Second)}, fencing.ErrInvalid},
		{"shared", l, "leader", fn, []fencing.CallOption{fencing.Shared()}, fencing.ErrInvalid},
		{"limit", l, "leader", fn, []fencing.CallOption{fencing.WithLimit(2)}, fencing.ErrInvalid},
		{"oversized name", l, strings.Repeat("x", fencing.MaxResourceLen+1), fn, nil, fencing.ErrInvalid},
		{"closed locker", closed, "leader", fn, nil, fencing.ErrClosed},
		{"nil client", fencing.New(nil), "leader", fn, nil, fencing.ErrInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.l.Lead(t.Context(), tc.leader, tc.fn, tc.opts...)
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want an error matching %v", err, tc.want)
			}
		})
	}
	if n := keysCount(t, r); n != 0 {
		t.Fatalf("got %d keys after bad input, want none", n)
	}
}

func TestLeadFnErrorResigns(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	l := newLocker(t, r)
	other := newLocker(t, r)
	wantErr := errors.New("leader failed")
	var token int64
	err := l.Lead(t.Context(), "leader", func(ctx context.Context) error {
		token, _ = fencing.TokenFromContext(ctx)
		if until, ok := fencing.ValidUntilFromContext(ctx); !ok || time.Until(until) < 20*time.Second {
			t.Errorf("ValidUntilFromContext: got %v (%v left), want about the 30s lease", ok, time.Until(until))
		}
		return wantErr
	})
	if !errors.Is(err, wantErr) {
		t.Fatalf("Lead: got %v, want fn's error", err)
	}
	if token != 1 {
		t.Fatalf("got epoch %d, want 1", token)
	}
	// Resigned: the next candidate leads at once, with the next epoch.
	lock := mustAcquire(t, other, "leader")
	defer lock.Release(context.Background())
	if lock.Token() != 2 {
		t.Fatalf("got token %d after the resignation, want 2", lock.Token())
	}
}

func TestLeadFnNilResigns(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	l := newLocker(t, r)
	calls := 0
	err := l.Lead(t.Context(), "leader", func(context.Context) error { calls++; return nil })
	if err != nil || calls != 1 {
		t.Fatalf("Lead: got %v after %d calls, want nil after 1", err, calls)
	}
	if n := r.Client.Exists(t.Context(), r.Prefix+"{leader}:lock").Val(); n != 0 {
		t.Fatal("leadership still held after Lead returned")
	}
}

func TestLeadContextEnds(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	l := newLocker(t, r)
	other := newLocker(t, r)

	t.Run("while leading", func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		leading := make(chan struct{})
		done := leadAsync(ctx, l, "leader", func(ctx context.Context) error {
			close(leading)
			<-ctx.Done()
			return context.Cause(ctx)
		})
		<-leading
		cancel()
		if err := waitErr(t, done, 5*time.Second); !errors.Is(err, context.Canceled) || errors.Is(err, fencing.ErrNotHeld) {
			t.Fatalf("got %v, want context.Canceled", err)
		}
		if n := r.Client.Exists(t.Context(), r.Prefix+"{leader}:lock").Val(); n != 0 {
			t.Fatal("leadership still held after Lead returned")
		}
	})
	t.Run("while campaigning", func(t *testing.T) {
		held := mustAcquire(t, other, "leader")
		defer held.Release(context.Background())
		ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
		defer cancel()
		err := l.Lead(ctx, "leader", func(context.Context) error {
			t.Error("fn ran while another leads")
			return nil
		})
		if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, fencing.ErrNotAcquired) {
			t.Fatalf("got %v, want context.DeadlineExceeded alone", err)
		}
	})
}

// TestLeadLostCampaignsAgain takes leadership away three ways (the lock deleted, the lock taken
// over after its lease ran out, Redis refusing every command past the lease) and checks that
// fn's context ends with ErrNotHeld and that Lead campaigns again with a higher epoch.
func TestLeadLostCampaignsAgain(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"deleted", "taken over", "redis down"} {
		t.Run(how, func(t *testing.T) {
			r := redistest.New(t)
			if how == "redis down" && r.Mini == nil {
				t.Skip("needs miniredis's SetError")
			}
			const ttl = 300 * time.Millisecond
			l := newLocker(t, r, fencing.WithTTL(ttl), fencing.WithRetryBackoff(10*time.Millisecond, 50*time.Millisecond))
			other := newLocker(t, r)
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			starts, causes := make(chan int64, 10), make(chan error, 10)
			done := leadAsync(ctx, l, "leader", func(ctx context.Context) error {
				token, _ := fencing.TokenFromContext(ctx)
				starts <- token
				<-ctx.Done()
				causes <- context.Cause(ctx)
				return context.Cause(ctx)
			})
			first := recv(t, starts, 5*time.Second, "the first term")
			var intruder int64
			switch how {
			case "deleted":
				r.Client.Del(t.Context(), r.Prefix+"{leader}:lock")
			case "taken over":
				// Another owner takes the name as if the lease had lapsed.
				r.Client.Del(t.Context(), r.Prefix+"{leader}:lock")
				lock := mustAcquire(t, other, "leader", fencing.WithTTL(ttl))
				intruder = lock.Token()
				defer lock.Release(context.Background())
				time.AfterFunc(2*ttl, func() { _ = lock.Release(context.Background()) })
			case "redis down":
				r.Mini.SetError("LOADING Redis is loading the dataset in memory")
			}
			if cause := recv(t, causes, 5*time.Second, "fn's context to end"); !errors.Is(cause, fencing.ErrNotHeld) {
				t.Fatalf("fn's context cause: got %v, want ErrNotHeld", cause)
			}
			if how == "redis down" {
				r.Mini.SetError("")
				r.Mini.FastForward(ttl) // the lease has run out meanwhile
			}
			// Campaigns again: the second term has a higher epoch.
			second := recv(t, starts, 10*time.Second, "the second term")
			if second <= first || second <= intruder {
				t.Fatalf("got epoch %d after %d (and the intruder's %d), want it higher", second, first, intruder)
			}
			cancel()
			if err := waitErr(t, done, 5*time.Second); !errors.Is(err, context.Canceled) {
				t.Fatalf("Lead: got %v, want context.Canceled", err)
			}
			t.Logf("epochs %d then %d", first, second)
		})
	}
}

// TestLeadEpochsIncrease runs four candidates that each lead five short terms: terms never
// overlap, and each term's epoch is higher than every earlier one's.
func TestLeadEpochsIncrease(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	var (
		mu     sync.Mutex
		epochs []int64
		inside atomic.Int32
	)
	var wg sync.WaitGroup
	for range 4 {
		l := newLocker(t, r)
		wg.Go(func() {
			for range 5 {
				err := l.Lead(t.Context(), "leader", func(ctx context.Context) error {
					if inside.Add(1) != 1 {
						t.Error("two leaders at once")
					}
					defer inside.Add(-1)
					token, _ := fencing.TokenFromContext(ctx)
					mu.Lock()
					epochs = append(epochs, token)
					mu.Unlock()
					time.Sleep(5 * time.Millisecond) // the term's work
					return nil
				})
				if err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if len(epochs) != 20 {
		t.Fatalf("got %d terms, want 20", len(epochs))
	}
	for i := 1; i < len(epochs); i++ {
		if epochs[i] <= epochs[i-1] {
			t.Fatalf("epoch %d follows %d: epochs %v", epochs[i], epochs[i-1], epochs)
		}
	}
}

// TestLeadPausedLeaderFenced pauses a leader past its lease (its fn ignores the cancellation,
// as a process stopped by the scheduler or a GC pause would): its successor leads with a
// higher epoch, and a fenced store given the epochs refuses the old leader's late write.
func TestLeadPausedLeaderFenced(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	const ttl = 500 * time.Millisecond
	old, next := newLocker(t, r, fencing.WithTTL(ttl)), newLocker(t, r, fencing.WithTTL(ttl))
	var st store.Memory
	pause, resumed := make(chan struct{}), make(chan error, 1)
	var terms atomic.Int32
	oldDone := leadAsync(t.Context(), old, "leader", func(ctx context.Context) error {
		if terms.Add(1) > 1 {
			// Its second term: Lead campaigned again after the first failed unled, and won
			// once the new leader resigned. It leads until the test ends.
			<-ctx.Done()
			return context.Cause(ctx)
		}
		token, _ := fencing.TokenFromContext(ctx)
		if err := st.Write("ledger", token, func() error { return nil }); err != nil {
			t.Errorf("old leader's first write: %v", err)
		}
		<-pause // paused: the lease runs out meanwhile
		resumed <- st.Write("ledger", token, func() error { return nil })
		return errors.New("old leader stops")
	})
	waitFor(t, 5*time.Second, "the old leader's term", func() bool { return st.Mark("ledger") == 1 })
	// The lease runs out while the old leader is paused (its renewals cannot run in a
	// paused process; here they still would, so the key goes as it does when it expires).
	r.Client.Del(t.Context(), r.Prefix+"{leader}:lock")
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var nextToken atomic.Int64
	nextDone := leadAsync(ctx, next, "leader", func(ctx context.Context) error {
		token, _ := fencing.TokenFromContext(ctx)
		if err := st.Write("ledger", token, func() error { return nil }); err != nil {
			t.Errorf("new leader's write: %v", err)
		}
		nextToken.Store(token)
		<-ctx.Done()
		return context.Cause(ctx)
	})
	waitFor(t, 10*time.Second, "the new leader's write", func() bool { return nextToken.Load() != 0 })
	close(pause)
	err := <-resumed
	var stale *store.StaleTokenError
	if !errors.As(err, &stale) || stale.Token != 1 || stale.Mark != nextToken.Load() {
		t.Fatalf("old leader's late write: got %v, want refused with token 1 below mark %d", err, nextToken.Load())
	}
	// The old leader's fn failed after its leadership was lost: Lead campaigns again (in the
	// queue behind the new leader), and leads again once the new leader resigns.
	cancel()
	if err := waitErr(t, nextDone, 5*time.Second); !errors.Is(err, context.Canceled) {
		t.Fatalf("new leader's Lead: got %v", err)
	}
	for deadline := time.Now().Add(5 * time.Second); terms.Load() < 2; time.Sleep(5 * time.Millisecond) {
		select {
		case err := <-oldDone:
			t.Fatalf("old leader's Lead returned %v; want it campaigning again", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the old leader did not lead again after the new leader resigned")
		}
	}
	select {
	case err := <-oldDone:
		t.Fatalf("old leader's Lead returned %v during its second term", err)
	default:
	}
}

// TestLeadTakeoverAfterKill runs a leader in a child process (this test binary run again) with
// a candidate queued behind it in this process, kills the leader with SIGKILL, and measures on
// the server's clock how long after the dead leader's lease ended the candidate led: at the
// latest its next regular check (at most 1.2 of WithRetryBackoff's max) and a loaded machine's
// delays; the check at the lease's very end is TestLeaseSeen's, which needs no clock.
func TestLeadTakeoverAfterKill(t *testing.T) {
	t.Parallel()
	if os.Getenv("FENCEKIT_CHILD_LEADER") != "" {
		childLeader()
		return
	}
	const (
		ttl  = 2 * time.Second
		poll = time.Second // the candidate's regular check, jittered by ±20%
		load = time.Second // what a loaded machine may add: a late timer, a slow reply
	)
	r := redistest.New(t)
	l := newLocker(t, r, fencing.WithTTL(ttl), fencing.WithRetryBackoff(50*time.Millisecond, poll))
	child := exec.Command(os.Args[0], "-test.run=^TestLeadTakeoverAfterKill$")
	child.Env = append(os.Environ(), "FENCEKIT_CHILD_LEADER="+r.Addr+","+strconv.Itoa(r.DB)+","+r.Prefix+","+strconv.FormatInt(ttl.Milliseconds(), 10))
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = child.Process.Kill(); _ = child.Wait() }()
	lines := bufio.NewScanner(out)
	if !lines.Scan() || !strings.HasPrefix(lines.Text(), "leading ") {
		t.Fatalf("child: got %q, want it leading", lines.Text())
	}
	childToken, _ := strconv.ParseInt(strings.TrimPrefix(lines.Text(), "leading "), 10, 64)

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	type won struct {
		at    time.Time // the server's clock, once the candidate leads
		token int64
	}
	got := make(chan won, 1)
	done := leadAsync(ctx, l, "leader", func(ctx context.Context) error {
		token, _ := fencing.TokenFromContext(ctx)
		at, _ := r.Client.Time(ctx).Result()
		got <- won{at, token}
		<-ctx.Done()
		return context.Cause(ctx)
	})
	waitFor(t, 5*time.Second, "the candidate in the queue", func() bool { return queueLen(r, "leader") == 1 })
	key := r.Prefix + "{leader}:lock"
	if r.Mini == nil { // kill right after a renewal, when the lease has the most left
		before := r.Client.PTTL(t.Context(), key).Val()
		waitFor(t, 2*ttl, "a renewal", func() bool {
			d := r.Client.PTTL(t.Context(), key).Val()
			defer func() { before = d }()
			return d > before
		})
	}
	if err := child.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = child.Wait()
	// The lease's end as the server sees it, once the leader can renew no more.
	var now *redis.TimeCmd
	var left *redis.DurationCmd
	if _, err := r.Client.Pipelined(t.Context(), func(p redis.Pipeliner) error {
		now, left = p.Time(t.Context()), p.PTTL(t.Context(), key)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	ended := now.Val().Add(max(left.Val(), 0))
	r.Advance(ttl) // on miniredis, the lease runs out only so
	w := recv(t, got, ttl+10*time.Second, "the candidate to lead")
	if w.token <= childToken {
		t.Errorf("got epoch %d after the dead leader's %d, want it higher", w.token, childToken)
	}
	if r.Mini == nil {
		lag := w.at.Sub(ended)
		if lag > poll*6/5+load {
			t.Errorf("the candidate led %v after the dead leader's lease ended (server's clock), want at most its next check, %v, and %v", lag, poll*6/5, load)
		}
		t.Logf("FIGURE lead takeover after SIGKILL: %v after the lease ended (server's clock; lease %v, %v of it left at the kill), epochs %d -> %d",
			lag.Round(time.Millisecond), ttl, left.Val(), childToken, w.token)
	}
	cancel()
	if err := waitErr(t, done, 5*time.Second); !errors.Is(err, context.Canceled) {
		t.Fatalf("Lead: got %v", err)
	}
}

// childLeader is the child process of TestLeadTakeoverAfterKill: it leads and never returns
// (it is killed).
func childLeader() {
	parts := strings.Split(os.Getenv("FENCEKIT_CHILD_LEADER"), ",")
	if len(parts) != 4 {
		os.Exit(2)
	}
	db, _ := strconv.Atoi(parts[1])
	lease, _ := strconv.Atoi(parts[3])
	c := redis.NewClient(&redis.Options{Addr: parts[0], DB: db, DisableIdentity: true})
	l := fencing.New(c, fencing.WithPrefix(parts[2]), fencing.WithTTL(time.Duration(lease)*time.Millisecond))
	err := l.Lead(context.Background(), "leader", func(ctx context.Context) error {
		token, _ := fencing.TokenFromContext(ctx)
		fmt.Println("leading", token)
		<-ctx.Done()
		return context.Cause(ctx)
	})
	fmt.Println("child's Lead:", err)
	select {}
}

// TestLeadBacksOffAfterRedisErrors starts Lead while Redis refuses every command: campaigns
// fail and are retried after a doubling back-off, and Lead leads once Redis answers again.
func TestLeadBacksOffAfterRedisErrors(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	if r.Mini == nil {
		t.Skip("needs miniredis's SetError")
	}
	var (
		mu       sync.Mutex
		failures []time.Time
	)
	hooks := fencing.WithHooks(observe.Hooks{End: func(_ context.Context, e observe.Event) {
		if e.Op == observe.OpCampaign && e.Outcome == observe.OutcomeError {
			mu.Lock()
			failures = append(failures, time.Now())
			mu.Unlock()
		}
	}})
	l := newLocker(t, r, hooks, fencing.WithRetryBackoff(10*time.Millisecond, 80*time.Millisecond))
	r.Mini.SetError("ERR injected") // an error go-redis does not retry by itself
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	led := make(chan int64, 1)
	done := leadAsync(ctx, l, "leader", func(ctx context.Context) error {
		token, _ := fencing.TokenFromContext(ctx)
		led <- token
		<-ctx.Done()
		return context.Cause(ctx)
	})
	waitFor(t, 5*time.Second, "five failed campaigns", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(failures) >= 5
	})
	r.Mini.SetError("")
	if token := recv(t, led, 5*time.Second, "leadership once Redis answers"); token != 1 {
		t.Fatalf("got epoch %d, want 1", token)
	}
	cancel()
	if err := waitErr(t, done, 5*time.Second); !errors.Is(err, context.Canceled) {
		t.Fatalf("Lead: got %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	// The back-off doubles from 10ms to 80ms: the i-th gap lasts at least 10ms doubled i
	// times (a loaded machine only makes the gaps longer, so these are lower bounds).
	for i, want := 0, 10*time.Millisecond; i < 4; i, want = i+1, 2*want {
		if gap := failures[i+1].Sub(failures[i]); gap < want {
			t.Errorf("gap %d between failed campaigns %v, want at least %v: a doubling back-off from 10ms", i+1, gap, want)
		}
	}
}
