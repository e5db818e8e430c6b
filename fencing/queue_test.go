package fencing_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
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
)

// process returns a Locker on a client of its own: as far as Redis can tell, another
// process.
func process(t *testing.T, r *redistest.Redis, opts ...fencing.Option) *fencing.Locker {
	t.Helper()
	l := fencing.New(r.NewClient(t), append([]fencing.Option{fencing.WithPrefix(r.Prefix)}, opts...)...)
	t.Cleanup(func() { _ = l.Close() })
	return l
}

func queueLen(r *redistest.Redis, resource string) int64 {
	return r.Client.LLen(context.Background(), r.Prefix+"{"+resource+"}:queue").Val()
}

// handOver queues waiter for "res" behind held, releases held and returns the waiter's lock,
// which it releases when the test ends. before runs after the waiter is queued, just before
// the release.
func handOver(t *testing.T, r *redistest.Redis, held *fencing.Lock, waiter *fencing.Locker, before func()) *fencing.Lock {
	t.Helper()
	got := acquireAsync(t.Context(), waiter, "res")
	waitFor(t, 5*time.Second, "the waiter in the queue", func() bool { return queueLen(r, "res") == 1 })
	if before != nil {
		before()
	}
	if err := held.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	a := <-got
	if a.err != nil {
		t.Fatal(a.err)
	}
	t.Cleanup(func() { _ = a.lock.Release(context.Background()) })
	return a.lock
}

// quick is how soon after a release the next waiter must be served: by the grant's
// announcement, or by a poll that found the grant first (a waiter polls about once a second,
// and on a loaded machine the announcement can come later than a poll). Both are well before
// the 3s after which a waiter's entry lapses, which a wait that missed its grant needs.
// (It was 500ms, meant to tell an announcement from a poll; a loaded machine served an
// announced grant in 572ms.)
const quick = 2 * time.Second

// TestFIFOAcrossLockers queues waiters of three Lockers in the order A, B, A, C, B and checks
// that they are served in that order, each with the next token, and each without polling.
func TestFIFOAcrossLockers(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	holder := process(t, r)
	a, b, c := process(t, r, slowBackoff), process(t, r, slowBackoff), process(t, r, slowBackoff)
	order := []*fencing.Locker{a, b, a, c, b}
	held := mustAcquire(t, holder, "res")
	type served struct {
		who   int
		token int64
		at    time.Time
	}
	got := make(chan served, len(order))
	var wg sync.WaitGroup
	for i, l := range order {
		wg.Go(func() {
			lock, err := l.Acquire(t.Context(), "res")
			if err != nil {
				t.Error(err)
				return
			}
			got <- served{i, lock.Token(), time.Now()}
			time.Sleep(5 * time.Millisecond)
			if err := lock.Release(context.Background()); err != nil {
				t.Error(err)
			}
		})
		waitFor(t, 5*time.Second, "waiter "+strconv.Itoa(i)+" in the Redis queue", func() bool { return queueLen(r, "res") == int64(i+1) })
	}
	last := time.Now()
	if err := held.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(got)
	want := 0
	for s := range got {
		if s.who != want || s.token != held.Token()+int64(want)+1 {
			t.Fatalf("position %d: waiter %d with token %d, want waiter %d with token %d", want, s.who, s.token, want, held.Token()+int64(want)+1)
		}
		if d := s.at.Sub(last); d > quick {
			t.Errorf("waiter %d served %v after the previous release: not by a grant", s.who, d)
		}
		last = s.at
		want++
	}
	if want != len(order) {
		t.Fatalf("%d waiters served, want %d", want, len(order))
	}
	if n := queueLen(r, "res"); n != 0 {
		t.Errorf("queue holds %d elements after all were served", n)
	}
}

// TestNewcomerDoesNotJumpQueue frees a lock behind the queue's back (its holder's lease ran
// out): a newcomer's TryAcquire from another Locker is refused while a waiter is queued, and
// hands the lock to that waiter on its way.
func TestNewcomerDoesNotJumpQueue(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	holder, waiter, newcomer := process(t, r), process(t, r, slowBackoff), process(t, r)
	_ = mustAcquire(t, holder, "res", fencing.WithTTL(time.Hour))
	got := acquireAsync(t.Context(), waiter, "res")
	waitFor(t, 5*time.Second, "the waiter in the queue", func() bool { return queueLen(r, "res") == 1 })
	r.Client.Del(context.Background(), r.Prefix+"{res}:lock") // the lease ran out
	begin := time.Now()
	if lock, err := newcomer.TryAcquire(t.Context(), "res"); !errors.Is(err, fencing.ErrNotAcquired) {
		t.Fatalf("newcomer: got %v, %v; want ErrNotAcquired while a waiter is queued", lock, err)
	}
	a := <-got
	if a.err != nil {
		t.Fatal(a.err)
	}
	if d := a.at.Sub(begin); d > quick {
		t.Errorf("the queued waiter got the lock %v after the newcomer's try: not granted by it", d)
	}
	if lock, err := newcomer.Acquire(t.Context(), "res", fencing.WithMaxWait(0)); !errors.Is(err, fencing.ErrNotAcquired) {
		t.Fatalf("newcomer while the waiter holds: got %v, %v", lock, err)
	}
	_ = a.lock.Release(t.Context())
}

// TestContentionAcrossLockers runs many goroutines of many Lockers against one resource with a
// fenced store: no stale write is accepted, no two sections overlap, and the queue is empty
// at the end.
func TestContentionAcrossLockers(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	const lockers, perLocker, sections = 8, 25, 400
	var store fencedStore
	var done atomic.Int64
	var wg sync.WaitGroup
	for range lockers {
		l := process(t, r)
		for range perLocker {
			wg.Go(func() {
				for done.Add(1) <= sections {
					err := l.Do(t.Context(), "res", func(ctx context.Context) error {
						store.enter()
						defer store.leave()
						token, _ := fencing.TokenFromContext(ctx)
						if !store.write(token) {
							return errors.New("stale write")
						}
						return nil
					})
					if err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
	}
	wg.Wait()
	if store.writes != sections || store.rejected != 0 || store.overlaps.Load() != 0 {
		t.Fatalf("writes %d (want %d), rejected %d, overlaps %d; want no rejection and no overlap", store.writes, sections, store.rejected, store.overlaps.Load())
	}
	waitFor(t, 5*time.Second, "an empty queue", func() bool { return queueLen(r, "res") == 0 })
}

// TestCancelledWaiterJustGranted cancels a waiter as the lock is granted to it: whether it
// took the lock or left, the next waiter gets it by a grant, not after a lease.
func TestCancelledWaiterJustGranted(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	holder, next := process(t, r), process(t, r, slowBackoff)
	for i := range 20 {
		t.Run(strconv.Itoa(i), func(t *testing.T) {
			victim := process(t, r, slowBackoff)
			res := "res" + strconv.Itoa(i)
			held := mustAcquire(t, holder, res, fencing.WithTTL(time.Hour))
			vctx, cancel := context.WithCancel(t.Context())
			vgot := acquireAsync(vctx, victim, res)
			waitFor(t, 5*time.Second, "the victim in the queue", func() bool { return queueLen(r, res) == 1 })
			ngot := acquireAsync(t.Context(), next, res)
			waitFor(t, 5*time.Second, "the next waiter in the queue", func() bool { return queueLen(r, res) == 2 })
			if i%2 == 0 {
				cancel()
			}
			begin := time.Now()
			if err := held.Release(t.Context()); err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Duration(i%5) * 100 * time.Microsecond)
			cancel()
			v := <-vgot
			if v.err == nil {
				_ = v.lock.Release(t.Context())
			} else if !errors.Is(v.err, context.Canceled) {
				t.Fatalf("victim: %v", v.err)
			}
			n := <-ngot
			if n.err != nil {
				t.Fatal(n.err)
			}
			if d := n.at.Sub(begin); d > quick {
				t.Errorf("next waiter served %v after the release (victim took it: %v)", d, v.err == nil)
			}
			_ = n.lock.Release(t.Context())
		})
	}
}

// sentCounter counts the commands a client sends while it is armed, but the EVALSHA of the
// script whose digest is poll (a waiter's check, which its own timer sends).
type sentCounter struct {
	poll  string
	armed atomic.Bool
	sent  atomic.Int32
}

func (h *sentCounter) count(cmds ...redis.Cmder) {
	if !h.armed.Load() {
		return
	}
	for _, c := range cmds {
		if args := c.Args(); len(args) < 2 || args[0] != "evalsha" || args[1] != h.poll {
			h.sent.Add(1)
		}
	}
}

func (h *sentCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *sentCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.count(cmds...)
		return next(ctx, cmds)
	}
}
func (h *sentCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.count(cmd)
		return next(ctx, cmd)
	}
}

// TestHandOverRoundTrips counts what a waiter's client sends between the holder's release
// and the moment the waiter holds the lock: nothing, inside Do (whose renewals extend the
// short lease of the grant) and for Acquire (whose Lock extends it later, see
// TestGrantExtensionRidesOutRedisErrors). The waiter's checks, which its timer sends once a
// second whatever happens (and a loaded machine may send in the moment of the hand-off), do
// not count; TestWaiterWakesOnRelease and the queue tests see that the announcement serves it.
func TestHandOverRoundTrips(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		do   bool
		want int32
	}{{"do", true, 0}, {"acquire", false, 0}} {
		t.Run(tc.name, func(t *testing.T) {
			r := redistest.New(t)
			holder := process(t, r)
			c := r.NewClient(t)
			_, poll, err := fencing.LoadScripts(t.Context(), c) // so that no NOSCRIPT retry counts
			if err != nil {
				t.Fatal(err)
			}
			counter := &sentCounter{poll: poll}
			c.AddHook(counter)
			waiter := fencing.New(c, fencing.WithPrefix(r.Prefix), fencing.WithRetryBackoff(5*time.Second, 10*time.Second))
			defer waiter.Close()
			warm := mustAcquire(t, waiter, "warm")
			if err := warm.Extend(t.Context(), time.Minute); err != nil {
				t.Fatal(err)
			}
			_ = warm.Release(t.Context())
			held := mustAcquire(t, holder, "res", fencing.WithTTL(time.Hour))
			type result struct {
				token int64
				sent  int32
				err   error
			}
			got := make(chan result, 1)
			go func() {
				if tc.do {
					err := waiter.Do(t.Context(), "res", func(ctx context.Context) error {
						token, _ := fencing.TokenFromContext(ctx)
						got <- result{token, counter.sent.Load(), nil}
						return nil
					})
					if err != nil {
						got <- result{err: err}
					}
					return
				}
				lock, err := waiter.Acquire(t.Context(), "res")
				if err != nil {
					got <- result{err: err}
					return
				}
				got <- result{lock.Token(), counter.sent.Load(), nil}
				_ = lock.Release(context.Background())
			}()
			// The join's reply has reached the waiter, and its subscription is confirmed.
			waitFor(t, 10*time.Second, "the waiter queued and listening", func() bool {
				return fencing.Queued(waiter) == 1 && fencing.Listening(waiter, "res")
			})
			counter.armed.Store(true)
			if err := held.Release(t.Context()); err != nil {
				t.Fatal(err)
			}
			res := <-got
			if res.err != nil {
				t.Fatal(res.err)
			}
			if res.token != held.Token()+1 {
				t.Errorf("granted token %d, want %d", res.token, held.Token()+1)
			}
			if res.sent != tc.want {
				t.Errorf("the waiter's client sent %d commands between the release and holding the lock, want %d", res.sent, tc.want)
			}
		})
	}
}

// TestDoGrantDatedByOwnRelease checks that a release dates the grants after it: Locker A's
// waiters a1 and a2 are queued with B's b1 between them (a1, b1, a2), and a1 holds the lock
// for longer than half a grant's lease. Nothing A sent meanwhile saw another's token held (a2
// joined with RPUSHX; a2's polls saw a1's own grant), so without the date of a1's release the
// grant to a2, announced after b1's section, would count its lease from a1's join, show less
// than half of it left and be extended before Do runs fn: a round trip on every hand-over of
// a busy resource. Inside Do, A sends no extension (OpExtend) at all. b1's section starts
// once a1's Do has returned, after the reply to a1's release: a grant announced before that
// reply is read is dated by older calls.
func TestDoGrantDatedByOwnRelease(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	holder, b := process(t, r), process(t, r)
	var extends atomic.Int32
	a := process(t, r, fencing.WithHooks(observe.Hooks{End: func(_ context.Context, e observe.Event) {
		if e.Op == observe.OpExtend {
			extends.Add(1)
		}
	}}))
	held := mustAcquire(t, holder, "res", fencing.WithTTL(time.Hour))
	tokens := make(chan string, 3)
	errs := make(chan error, 3)
	a1Done := make(chan struct{})
	do := func(l *fencing.Locker, name string, work func()) {
		errs <- l.Do(t.Context(), "res", func(ctx context.Context) error {
			token, _ := fencing.TokenFromContext(ctx)
			tokens <- fmt.Sprintf("%s:%d", name, token)
			work()
			return nil
		})
	}
	go func() {
		defer close(a1Done)
		// The section's work: longer than half a grant's lease (1.5s).
		do(a, "a1", func() { time.Sleep(1600 * time.Millisecond) })
	}()
	waitFor(t, 5*time.Second, "a1 in the queue", func() bool { return queueLen(r, "res") == 1 })
	go do(b, "b1", func() { <-a1Done })
	waitFor(t, 5*time.Second, "b1 in the queue", func() bool { return queueLen(r, "res") == 2 })
	go do(a, "a2", func() {})
	waitFor(t, 5*time.Second, "a2 in the queue", func() bool { return queueLen(r, "res") == 3 })
	if err := held.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	close(tokens)
	var got []string
	for s := range tokens {
		got = append(got, s)
	}
	want := []string{
		fmt.Sprintf("a1:%d", held.Token()+1), fmt.Sprintf("b1:%d", held.Token()+2), fmt.Sprintf("a2:%d", held.Token()+3),
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("served %v, want %v", got, want)
	}
	if n := extends.Load(); n != 0 {
		t.Errorf("A extended %d grants before running fn, want 0", n)
	}
}

// TestGrantChannelPerLocker checks that each waiting Locker hears the grants of a resource on
// a channel of its own, <prefix>{R}:grant:<Locker id>, so that a grant wakes the Locker it is
// for and no other, and a release costs Redis the same however many Lockers wait.
func TestGrantChannelPerLocker(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	holder, a, b := process(t, r), process(t, r), process(t, r)
	held := mustAcquire(t, holder, "res", fencing.WithTTL(time.Hour))
	gotA := acquireAsync(t.Context(), a, "res")
	waitFor(t, 5*time.Second, "A's waiter in the queue", func() bool { return queueLen(r, "res") == 1 })
	gotB := acquireAsync(t.Context(), b, "res")
	waitFor(t, 5*time.Second, "B's waiter in the queue", func() bool { return queueLen(r, "res") == 2 })
	base := r.Prefix + "{res}:grant"
	want := []string{base + ":" + fencing.ID(a), base + ":" + fencing.ID(b)}
	waitFor(t, 5*time.Second, "the subscriptions", func() bool {
		return len(r.Client.PubSubChannels(t.Context(), base+"*").Val()) == 2
	})
	chans := r.Client.PubSubChannels(t.Context(), base+"*").Val()
	slices.Sort(chans)
	slices.Sort(want)
	if !slices.Equal(chans, want) {
		t.Fatalf("grant channels %v, want %v", chans, want)
	}
	for ch, n := range r.Client.PubSubNumSub(t.Context(), chans...).Val() {
		if n != 1 {
			t.Errorf("%s: %d subscribers, want 1", ch, n)
		}
	}
	if err := held.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	for _, got := range []<-chan acquired{gotA, gotB} {
		res := <-got
		if res.err != nil {
			t.Fatal(res.err)
		}
		_ = res.lock.Release(t.Context())
	}
}

// TestLapsedKeyListeningWaiter lets the waiter key of a queued waiter's Locker lapse, as
// after a long pause, while its subscription stays up: the release's announcement reaches it,
// so the waiter is alive and keeps its place; it gets the lock at once, with the very next
// token. Then the Locker waits again: the next grant is its next waiter's, with the next token
// again (a grant owed to nobody would be passed on, a turn wasted).
func TestLapsedKeyListeningWaiter(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	holder, a := process(t, r), process(t, r)
	held := mustAcquire(t, holder, "res", fencing.WithTTL(time.Hour))
	first := acquireAsync(t.Context(), a, "res")
	waitFor(t, 5*time.Second, "the first waiter in the queue", func() bool { return queueLen(r, "res") == 1 })
	waitSubscribed(t, r, "res")
	entry := r.Prefix + "{res}:w:" + fencing.ID(a)
	r.Client.Del(t.Context(), entry) // lapsed
	if err := held.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	got := <-first
	if got.err != nil {
		t.Fatal(got.err)
	}
	if got.lock.Token() != held.Token()+1 {
		t.Errorf("the listening waiter got token %d, want %d", got.lock.Token(), held.Token()+1)
	}
	if err := got.lock.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	again := mustAcquire(t, holder, "res", fencing.WithTTL(time.Hour))
	second := acquireAsync(t.Context(), a, "res")
	waitFor(t, 5*time.Second, "the second waiter in the queue, its Locker's key renewed", func() bool {
		return queueLen(r, "res") == 1 && r.Client.Exists(context.Background(), entry).Val() == 1
	})
	released := time.Now()
	if err := again.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	got = <-second
	if got.err != nil {
		t.Fatal(got.err)
	}
	defer got.lock.Release(context.Background())
	if got.lock.Token() != again.Token()+1 {
		t.Errorf("the second waiter got token %d, want %d: a grant was wasted", got.lock.Token(), again.Token()+1)
	}
	if d := got.at.Sub(released); d > quick {
		t.Errorf("the second waiter was served %v after the release, want within %v", d, quick)
	}
}

// TestKilledWaiterProcess queues a waiter in a child process (this test binary run again)
// behind a holder and a waiter of this process, then kills the child with SIGKILL, with TTLs
// of 10s and 60s, in Acquire and in Do:
//   - released at once, the lock goes to the dead child, whose waiter key is still alive,
//     with the short lease every grant starts with (grantLease, 3s) whatever the TTL: the
//     child would have extended it (Acquire) or renewed it (Do). The local waiter gets the lock
//     as that lease runs out: its poll (within a second) saw the lease left, and it checks
//     again when it ends (before, at its next poll: up to 1.2s later);
//   - released after entryTTL (3s), the child's waiter key has lapsed and is skipped: the
//     local waiter gets the lock by a grant at once.
//
// So a waiter killed with SIGKILL holds a resource up for grantLease and a round trip, 3s,
// after the release, whatever its TTL and whichever call it waited in.
func TestKilledWaiterProcess(t *testing.T) {
	if os.Getenv("FENCEKIT_CHILD_WAITER") != "" {
		childWaiter()
		return
	}
	const slack = 750 * time.Millisecond // a round trip on a loaded machine, under -race; a missed check costs a poll (1s)
	const granted = 3 * time.Second      // the lease of every grant
	for _, tc := range []struct {
		name    string
		do      bool          // the child waits in Do rather than Acquire
		ttl     time.Duration // the child's TTL
		before  time.Duration // between the kill and the release
		maxWait time.Duration // from the release to the local waiter's lock
	}{
		{"acquire/ttl=10s/granted-to-the-dead", false, 10 * time.Second, 0, granted + slack},
		{"acquire/ttl=60s/granted-to-the-dead", false, time.Minute, 0, granted + slack},
		{"do/ttl=10s/granted-to-the-dead", true, 10 * time.Second, 0, granted + slack},
		{"do/ttl=60s/granted-to-the-dead", true, time.Minute, 0, granted + slack},
		{"acquire/ttl=60s/entry-lapsed", false, time.Minute, 3 * time.Second, quick},
		{"do/ttl=60s/entry-lapsed", true, time.Minute, 3 * time.Second, quick},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := redistest.New(t)
			holder, local := process(t, r), process(t, r)
			held := mustAcquire(t, holder, "res", fencing.WithTTL(time.Hour))
			child := exec.Command(os.Args[0], "-test.run=^TestKilledWaiterProcess$")
			child.Env = append(os.Environ(), "FENCEKIT_CHILD_WAITER="+r.Addr+","+strconv.Itoa(r.DB)+","+r.Prefix+","+strconv.FormatInt(tc.ttl.Milliseconds(), 10)+","+strconv.FormatBool(tc.do))
			var out bytes.Buffer
			child.Stdout, child.Stderr = &out, &out
			if err := child.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() { _ = child.Process.Kill(); _ = child.Wait() }()
			waitFor(t, 10*time.Second, "the child in the queue", func() bool { return queueLen(r, "res") == 1 })
			got := acquireAsync(t.Context(), local, "res")
			waitFor(t, 5*time.Second, "the local waiter behind it", func() bool { return queueLen(r, "res") == 2 })
			if err := child.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			_ = child.Wait()
			if tc.before > 0 {
				if r.Mini != nil {
					// miniredis drops a closed connection's subscriptions when it next reads
					// from it: until then a grant announced to the dead child counts as heard.
					waitFor(t, 5*time.Second, "the dead child's subscription to end", func() bool {
						chans, err := r.Client.PubSubChannels(t.Context(), r.Prefix+"*").Result()
						return err == nil && !slices.ContainsFunc(chans, func(ch string) bool { return !strings.HasSuffix(ch, fencing.ID(local)) })
					})
					// FastForward would expire every key; expire the child's entry alone.
					for _, key := range r.Mini.Keys() {
						if strings.Contains(key, ":w:") && !strings.HasSuffix(key, fencing.ID(local)) {
							r.Mini.Del(key)
						}
					}
				} else {
					time.Sleep(tc.before)
				}
			}
			released := time.Now()
			if err := held.Release(t.Context()); err != nil {
				t.Fatal(err)
			}
			if tc.before == 0 {
				r.Advance(granted) // on miniredis, the dead child's lease runs out only so
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
			defer a.lock.Release(context.Background())
			d := a.at.Sub(released)
			if d > tc.maxWait {
				t.Errorf("the local waiter got the lock %v after the release, want at most %v", d, tc.maxWait)
			}
			t.Logf("FIGURE killed-waiter %s: released %v after the kill, next waiter served %v after the release, token %d", tc.name, tc.before, d.Round(time.Millisecond), a.lock.Token())
		})
	}
}

// childWaiter is the child process of TestKilledWaiterProcess: it waits for the lock and never
// returns (it is killed).
func childWaiter() {
	var addr, prefix string
	var db, lease int
	parts := bytes.Split([]byte(os.Getenv("FENCEKIT_CHILD_WAITER")), []byte(","))
	if len(parts) != 5 {
		os.Exit(2)
	}
	addr, prefix = string(parts[0]), string(parts[2])
	db, _ = strconv.Atoi(string(parts[1]))
	lease, _ = strconv.Atoi(string(parts[3]))
	c := redis.NewClient(&redis.Options{Addr: addr, DB: db})
	l := fencing.New(c, fencing.WithPrefix(prefix), fencing.WithTTL(time.Duration(lease)*time.Millisecond))
	if string(parts[4]) == "true" {
		err := l.Do(context.Background(), "res", func(context.Context) error { select {} })
		fmt.Println("child's Do:", err)
	} else {
		_, err := l.Acquire(context.Background(), "res")
		fmt.Println("child acquired:", err)
	}
	select {}
}

// dropOnce is a net.Conn that, once armed, lets the next release script through to the
// server and then loses its reply: it closes the connection, so go-redis retries the script
// on a new one.
type dropOnce struct {
	net.Conn
	armed   *atomic.Bool
	dropped *atomic.Int32
	drop    bool
	match   func([]byte) bool // the request to lose the reply of; nil: isRelease
}

// isRelease reports whether p is a release script (an exclusive lock's, or another kind's) as
// go-redis writes it: EVALSHA of its digest, or EVAL of its source after NOSCRIPT.
func isRelease(p []byte) bool {
	return bytes.Contains(p, []byte(fencing.ReleaseSHA())) || bytes.Contains(p, []byte(fencing.SharedReleaseSHA())) ||
		bytes.Contains(p, []byte("\n-- Release "))
}

func (c *dropOnce) Write(p []byte) (int, error) {
	match := c.match
	if match == nil {
		match = isRelease
	}
	if match(p) && c.armed.CompareAndSwap(true, false) {
		c.drop = true
	}
	return c.Conn.Write(p)
}

func (c *dropOnce) Read(p []byte) (int, error) {
	if c.drop {
		c.drop = false
		time.Sleep(50 * time.Millisecond) // the server runs the script meanwhile
		_ = c.Conn.Close()
		c.dropped.Add(1)
		return 0, net.ErrClosed
	}
	return c.Conn.Read(p)
}

// TestLostReleaseReply loses the reply to a release, with go-redis retrying: the retry
// returns what the first run did, so Release returns nil, whether the release deleted the
// lock (nobody waiting) or granted it to a waiter; the waiter gets the lock at once, whether
// it is another Locker's (it was announced) or the releasing Locker's own (the retry's reply
// carries the grant, as the lost one did).
func TestLostReleaseReply(t *testing.T) {
	t.Parallel()
	for _, same := range []bool{false, true} {
		t.Run(map[bool]string{false: "other-locker", true: "same-locker"}[same], func(t *testing.T) {
			r := redistest.New(t)
			if r.Mini != nil {
				t.Skip("miniredis drops a command whose connection closes before the reply; runs with FENCING_REDIS_ADDR")
			}
			var armed atomic.Bool
			var dropped atomic.Int32
			opts := r.Options()
			opts.MaxRetries = 3
			opts.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
				c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
				if err != nil {
					return nil, err
				}
				return &dropOnce{Conn: c, armed: &armed, dropped: &dropped}, nil
			}
			c := redis.NewClient(opts)
			t.Cleanup(func() { _ = c.Close() })
			holder := fencing.New(c, fencing.WithPrefix(r.Prefix), slowBackoff)
			t.Cleanup(func() { _ = holder.Close() })
			waiter := process(t, r, slowBackoff)
			if same {
				waiter = holder
			}
			held := mustAcquire(t, holder, "res", fencing.WithTTL(time.Hour))
			got := acquireAsync(t.Context(), waiter, "res")
			waitFor(t, 5*time.Second, "the waiter in the queue", func() bool { return queueLen(r, "res") == 1 })
			armed.Store(true)
			released := time.Now()
			err := held.Release(t.Context())
			if dropped.Load() != 1 {
				t.Fatalf("the release reply was not dropped (release: %v)", err)
			}
			if err != nil {
				t.Fatalf("release: got %v, want nil: the first run handed the lock on", err)
			}
			var a acquired
			select {
			case a = <-got:
			case <-time.After(10 * time.Second):
				t.Fatal("the waiter never got the lock the lost reply granted it")
			}
			if a.err != nil {
				t.Fatal(a.err)
			}
			if d := a.at.Sub(released); d > quick {
				t.Errorf("waiter served %v after the release", d)
			}
			if a.lock.Token() != held.Token()+1 {
				t.Errorf("token %d, want %d", a.lock.Token(), held.Token()+1)
			}
			if err := a.lock.Release(t.Context()); err != nil {
				t.Errorf("release of the granted lock: %v", err)
			}
		})
	}
}

// droppingClient returns a client of r whose connections, once armed is set, lose the
// reply to the next request match accepts (nil: the release script), and go-redis retries
// it; dropped counts the replies lost.
func droppingClient(t *testing.T, r *redistest.Redis, match func([]byte) bool) (c *redis.Client, armed *atomic.Bool, dropped *atomic.Int32) {
	return droppingClientRetries(t, r, match, 3)
}

// droppingClientRetries is droppingClient with go-redis retrying a command up to retries
// times (-1: never).
func droppingClientRetries(t *testing.T, r *redistest.Redis, match func([]byte) bool, retries int) (c *redis.Client, armed *atomic.Bool, dropped *atomic.Int32) {
	armed, dropped = new(atomic.Bool), new(atomic.Int32)
	opts := r.Options()
	opts.MaxRetries = retries
	opts.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &dropOnce{Conn: c, armed: armed, dropped: dropped, match: match}, nil
	}
	c = redis.NewClient(opts)
	t.Cleanup(func() { _ = c.Close() })
	return c, armed, dropped
}

// TestLostReplyOutcomes loses the reply to a release with nobody waiting, and to an
// extension, with go-redis retrying: each returns what its first run did (nil, the lock
// deleted or extended), where the retry alone would have found the lock gone (release) and
// reported ErrNotHeld. A release of a lock that had really passed on before it (its lease
// ran out and another Locker took it) still returns ErrNotHeld, and deletes nothing.
func TestLostReplyOutcomes(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	if r.Mini != nil {
		t.Skip("miniredis drops a command whose connection closes before the reply; runs with FENCING_REDIS_ADDR")
	}
	ctx := t.Context()

	t.Run("release/no-waiters", func(t *testing.T) {
		c, armed, dropped := droppingClient(t, r, nil)
		l := fencing.New(c, fencing.WithPrefix(r.Prefix))
		t.Cleanup(func() { _ = l.Close() })
		lock := mustAcquire(t, l, "free")
		armed.Store(true)
		err := lock.Release(ctx)
		if dropped.Load() != 1 {
			t.Fatalf("the release reply was not dropped (release: %v)", err)
		}
		if err != nil {
			t.Fatalf("release: got %v, want nil: its first run deleted the lock", err)
		}
		if n := r.Client.Exists(ctx, r.Prefix+"{free}:lock").Val(); n != 0 {
			t.Fatal("the lock is still there")
		}
		// The next acquisition is a new one: its own release is not answered by the record.
		again := mustAcquire(t, l, "free")
		if again.Token() != lock.Token()+1 {
			t.Fatalf("token %d, want %d", again.Token(), lock.Token()+1)
		}
		if err := again.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := again.Release(ctx); !errors.Is(err, fencing.ErrNotHeld) {
			t.Fatalf("second release of one acquisition: got %v, want ErrNotHeld", err)
		}
	})

	t.Run("release/passed-on", func(t *testing.T) {
		l := process(t, r)
		other := process(t, r)
		lock := mustAcquire(t, l, "lapsed", fencing.WithTTL(time.Second))
		waitFor(t, 5*time.Second, "the lease to run out", func() bool {
			return r.Client.Exists(ctx, r.Prefix+"{lapsed}:lock").Val() == 0
		})
		next := mustAcquire(t, other, "lapsed")
		if err := lock.Release(ctx); !errors.Is(err, fencing.ErrNotHeld) {
			t.Fatalf("release after the lease ran out: got %v, want ErrNotHeld", err)
		}
		if err := next.Release(ctx); err != nil {
			t.Fatalf("the new holder's release: %v (the stale release must not touch it)", err)
		}
	})

	t.Run("extend", func(t *testing.T) {
		isExtend := func(p []byte) bool {
			// EVALSHA (or EVAL), the digest, one key and two arguments: the extend script.
			return bytes.HasPrefix(p, []byte("*6\r\n$7\r\nevalsha\r\n")) || bytes.HasPrefix(p, []byte("*6\r\n$4\r\neval\r\n"))
		}
		c, armed, dropped := droppingClient(t, r, isExtend)
		l := fencing.New(c, fencing.WithPrefix(r.Prefix))
		t.Cleanup(func() { _ = l.Close() })
		lock := mustAcquire(t, l, "ext", fencing.WithTTL(2*time.Second))
		armed.Store(true)
		err := lock.Extend(ctx, time.Hour)
		if dropped.Load() != 1 {
			t.Fatalf("the extend reply was not dropped (extend: %v)", err)
		}
		if err != nil {
			t.Fatalf("extend: got %v, want nil", err)
		}
		if ttl := r.Client.PTTL(ctx, r.Prefix+"{ext}:lock").Val(); ttl < 30*time.Minute {
			t.Fatalf("TTL %v after the extension, want about an hour", ttl)
		}
		if err := lock.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// TestTimeFloorWaiter checks that a lock granted from the queue to a WithServerTimeFloor
// waiter carries a token at or above the server clock in microseconds.
func TestTimeFloorWaiter(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	holder, waiter := process(t, r), process(t, r, fencing.WithServerTimeFloor())
	held := mustAcquire(t, holder, "res")
	if held.Token() != 1 {
		t.Fatalf("holder token %d, want 1", held.Token())
	}
	var before time.Time
	lock := handOver(t, r, held, waiter, func() { before = r.Client.Time(context.Background()).Val() })
	if floor := before.UnixMicro(); lock.Token() < floor {
		t.Fatalf("granted token %d below the server clock %d", lock.Token(), floor)
	}
}

// TestRingWaitersPoll checks that waiting works on a Ring, where nothing is announced: the
// waiter finds its grant by polling.
func TestRingWaitersPoll(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": r.Addr}, DB: r.DB})
	t.Cleanup(func() { _ = ring.Close() })
	holder := fencing.New(ring, fencing.WithPrefix(r.Prefix))
	t.Cleanup(func() { _ = holder.Close() })
	waiter := fencing.New(ring, fencing.WithPrefix(r.Prefix), fencing.WithRetryBackoff(5*time.Millisecond, 20*time.Millisecond))
	t.Cleanup(func() { _ = waiter.Close() })
	held, err := holder.TryAcquire(t.Context(), "res")
	if err != nil {
		t.Fatal(err)
	}
	if lock := handOver(t, r, held, waiter, nil); lock.Token() != held.Token()+1 {
		t.Fatalf("token %d, want %d", lock.Token(), held.Token()+1)
	}
}

// TestDoGrantStartsShortAndRenews checks a waiter inside Do with a long TTL: the grant it gets
// from the queue carries a lease of at most 3s, and Do's first renewal, within a second,
// extends it to the TTL.
func TestDoGrantStartsShortAndRenews(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	holder, waiter := process(t, r), process(t, r)
	held := mustAcquire(t, holder, "res")
	key := r.Prefix + "{res}:lock"
	var granted, renewed time.Duration
	done := make(chan error, 1)
	go func() {
		done <- waiter.Do(t.Context(), "res", func(ctx context.Context) error {
			granted = r.Client.PTTL(ctx, key).Val()
			deadline := time.Now().Add(2500 * time.Millisecond)
			for time.Now().Before(deadline) {
				if renewed = r.Client.PTTL(ctx, key).Val(); renewed > 3*time.Second {
					return nil
				}
				time.Sleep(10 * time.Millisecond)
			}
			return errors.New("not renewed")
		}, fencing.WithTTL(time.Minute))
	}()
	waitFor(t, 5*time.Second, "the waiter in the queue", func() bool { return queueLen(r, "res") == 1 })
	if err := held.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Do: %v (lease at the grant %v, then %v)", err, granted, renewed)
	}
	if granted > 3*time.Second || granted <= 0 {
		t.Errorf("the grant's lease: %v, want at most 3s", granted)
	}
}

// TestDoGrantAnnouncedBeforeQueueReply holds the reply to the call that queued a waiter in
// Do until the grant's announcement, on the Locker's pub/sub connection, has been delivered to
// it: nothing orders the two connections. The grant is dated by the sending of that call, so
// Do runs fn on the short grant without extending it first, as when the reply comes first.
func TestDoGrantAnnouncedBeforeQueueReply(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	holder := process(t, r)
	join := heldReply(t, r)
	waiter := hooked(t, r, join)

	held := mustAcquire(t, holder, "res")
	key := r.Prefix + "{res}:lock"
	join.armed.Store(true)
	var granted time.Duration
	done := make(chan error, 1)
	go func() {
		done <- waiter.Do(t.Context(), "res", func(ctx context.Context) error {
			granted = r.Client.PTTL(ctx, key).Val()
			return nil
		}, fencing.WithTTL(time.Minute))
	}()
	<-join.blocked // the waiter is queued; its Locker has not read the reply
	if err := held.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the grant delivered", func() bool { return fencing.Granted(waiter) == 1 })
	close(join.unblock)
	if err := <-done; err != nil {
		t.Fatalf("Do: %v", err)
	}
	if granted > 3*time.Second || granted <= 0 {
		t.Errorf("the lease when fn started: %v, want the grant's, at most 3s: Do extended a grant it could not date", granted)
	}
}

// TestSubscribedWhileQueueing holds a waiter's subscription (its connection's dial) and the
// reply to the call that queued it, and releases the lock in between: the grant is announced
// before anyone listens, and the subscription is confirmed before the waiter counts as
// queued, so the confirmation wakes nobody. The waiter, which sent that call before it
// listened, checks with Redis as soon as its reply is read, instead of after a poll interval
// (a second, once subscribed).
func TestSubscribedWhileQueueing(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	holder := process(t, r)
	join := heldReply(t, r)
	dial := &dialGate{unblock: make(chan struct{})}
	c := r.NewClient(t)
	if err := c.Ping(t.Context()).Err(); err != nil { // a pooled connection for the commands
		t.Fatal(err)
	}
	c.AddHook(join)
	c.AddHook(dial)
	waiter := fencing.New(c, fencing.WithPrefix(r.Prefix), fencing.WithRetryBackoff(time.Millisecond, time.Second))
	t.Cleanup(func() { _ = waiter.Close() })

	held := mustAcquire(t, holder, "res")
	dial.armed.Store(true)
	join.armed.Store(true)
	got := acquireAsync(t.Context(), waiter, "res")
	<-join.blocked // queued in Redis; its Locker has not read the reply, nor subscribed
	if err := held.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	close(dial.unblock)
	waitFor(t, 5*time.Second, "the subscription confirmed", func() bool { return fencing.Listening(waiter, "res") })
	read := time.Now()
	close(join.unblock)
	a := <-got
	if a.err != nil {
		t.Fatal(a.err)
	}
	if d := a.at.Sub(read); d > 400*time.Millisecond {
		t.Fatalf("the waiter held the lock %v after its queueing call's reply: it waited for a poll", d)
	}
	if a.lock.Token() != held.Token()+1 {
		t.Fatalf("got token %d, want %d", a.lock.Token(), held.Token()+1)
	}
}

// dialGate holds every new connection, once armed, until unblock is closed.
type dialGate struct {
	armed   atomic.Bool
	unblock chan struct{}
}

func (g *dialGate) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if g.armed.Load() {
			<-g.unblock
		}
		return next(ctx, network, addr)
	}
}

func (*dialGate) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (*dialGate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// gate holds the first command, once armed, whose arguments match, until unblock is closed;
// blocked receives when it holds one, and finished is closed once that command has run. With
// replied set, the command runs first and the gate holds its reply from the caller.
type gate struct {
	match             func(args []any) bool
	replied           bool
	armed             atomic.Bool
	blocked           chan struct{}
	unblock, finished chan struct{}
}

func newGate(match func(args []any) bool) *gate {
	return &gate{match: match, blocked: make(chan struct{}, 1), unblock: make(chan struct{}), finished: make(chan struct{})}
}

func (*gate) DialHook(next redis.DialHook) redis.DialHook { return next }

func (*gate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (g *gate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !g.match(cmd.Args()) || !g.armed.CompareAndSwap(true, false) {
			return next(ctx, cmd)
		}
		defer close(g.finished)
		var err error
		if g.replied {
			err = next(ctx, cmd)
		}
		g.blocked <- struct{}{}
		<-g.unblock
		if !g.replied {
			err = next(ctx, cmd)
		}
		return err
	}
}

// heldReply returns a gate that, once armed, holds the reply to the next call that queues a
// waiter (an acquire script with a queue element) on r's server.
func heldReply(t *testing.T, r *redistest.Redis) *gate {
	t.Helper()
	acquireSHA, _ := scripts(t, r)
	g := newGate(evalsha(acquireSHA, 8))
	g.replied = true
	return g
}

// scripts loads the acquire and poll scripts into r's server and returns their digests.
func scripts(t *testing.T, r *redistest.Redis) (acquire, poll string) {
	t.Helper()
	acquire, poll, err := fencing.LoadScripts(t.Context(), r.Client)
	if err != nil {
		t.Fatal(err)
	}
	return acquire, poll
}

// hooked returns a Locker on a client of its own whose commands pass through hooks.
func hooked(t *testing.T, r *redistest.Redis, hooks ...redis.Hook) *fencing.Locker {
	t.Helper()
	return hookedAs(t, r, "", hooks...)
}

// hookedAs is hooked with the client named name (CLIENT SETNAME on each connection), "" none.
func hookedAs(t *testing.T, r *redistest.Redis, name string, hooks ...redis.Hook) *fencing.Locker {
	t.Helper()
	o := r.Options()
	o.ClientName = name
	c := redis.NewClient(o)
	t.Cleanup(func() { _ = c.Close() })
	for _, h := range hooks {
		c.AddHook(h)
	}
	l := fencing.New(c, fencing.WithPrefix(r.Prefix))
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// evalsha matches an EVALSHA of the script sha with at least n arguments in all.
func evalsha(sha string, n int) func(args []any) bool {
	return func(args []any) bool {
		return len(args) >= n && strings.EqualFold(fmt.Sprint(args[0]), "evalsha") && args[1] == sha
	}
}

// TestLeaveWaitsForPollInFlight holds a poll of a Locker's front waiter w1 between the moment
// it read its waiters' elements as queued and its script, while the lock is granted to the
// Locker's other waiter w2, queued in Redis before w1. Had w2 taken the lock and released it
// before the poll's script ran, the script would find w2's element neither queued nor
// holding, put it back as if dropped as dead, and a later poll could grant the lock to it, a
// waiter long gone, without a message: the lock would stay held for a lease by nobody (on
// miniredis, whose clock stands still, for good; the demo example hung so about once in
// fifteen runs). So a waiter leaves only once a poll in flight is done, and no element is put
// back.
func TestLeaveWaitsForPollInFlight(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	holder := process(t, r)
	acquireSHA, pollSHA := scripts(t, r)
	join := newGate(evalsha(acquireSHA, 8)) // an acquire script with a queue element
	poll := newGate(evalsha(pollSHA, 8))    // a poll with at least one element
	a := hooked(t, r, join, poll)
	w1Elem, w2Elem := fencing.ID(a)+".1.3000", fencing.ID(a)+".2.3000" // see lib.lua

	held := mustAcquire(t, holder, "res", fencing.WithTTL(time.Hour))
	// w1 is first in a's line, but its join is held until w2's element is in Redis.
	join.armed.Store(true)
	got1 := acquireAsync(t.Context(), a, "res")
	<-join.blocked
	got2 := acquireAsync(t.Context(), a, "res")
	waitFor(t, 5*time.Second, "w2 in the queue", func() bool { return queueLen(r, "res") == 1 })
	poll.armed.Store(true)
	close(join.unblock)
	<-join.finished
	select {
	case <-poll.blocked: // w1, the front waiter, polls (at the subscription, or within a second)
	case <-time.After(5 * time.Second):
		t.Fatal("the front waiter did not poll")
	}
	if q := r.Client.LRange(t.Context(), r.Prefix+"{res}:queue", 0, -1).Val(); !slices.Equal(q, []string{w2Elem, w1Elem}) {
		t.Fatalf("queue %v, want [w2 w1] = %v", q, []string{w2Elem, w1Elem})
	}
	if err := held.Release(t.Context()); err != nil { // grants the lock to w2
		t.Fatal(err)
	}
	release := func(res acquired) {
		t.Helper()
		if res.err != nil {
			t.Fatal(res.err)
		}
		if err := res.lock.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case res := <-got2: // w2 left while the poll was in flight
		release(res)
		close(poll.unblock)
	case <-time.After(300 * time.Millisecond):
		close(poll.unblock)
		release(<-got2)
	}
	<-poll.finished
	if q := r.Client.LRange(t.Context(), r.Prefix+"{res}:queue", 0, -1).Val(); slices.Contains(q, w2Elem) {
		t.Fatalf("queue %v after the poll: it put back w2's element %s, granted before", q, w2Elem)
	}
	release(<-got1)
	if n := queueLen(r, "res"); n != 0 {
		t.Fatalf("queue of %d after both waiters left, want it empty", n)
	}
}

// TestReleaseSkipsOnlyDeadWaiters releases a lock marked as having waiters when the only
// element queued is a dead waiter's (its Locker's key gone, nobody subscribed): the release
// drops it, deletes the lock and reports success.
func TestReleaseSkipsOnlyDeadWaiters(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	l := newLocker(t, r)
	ctx := t.Context()
	lock := mustAcquire(t, l, "res")
	lockKey, queueKey := r.Prefix+"{res}:lock", r.Prefix+"{res}:queue"
	if err := r.Client.RPush(ctx, queueKey, "deadlocker.1.3000").Err(); err != nil {
		t.Fatal(err)
	}
	if err := r.Client.Append(ctx, lockKey, "+").Err(); err != nil { // the mark of a queue (see lib.lua)
		t.Fatal(err)
	}
	if err := lock.Release(ctx); err != nil {
		t.Fatalf("Release: %v, want nil", err)
	}
	if n := r.Client.Exists(ctx, lockKey, queueKey).Val(); n != 0 {
		t.Fatalf("%d of the lock and queue keys left, want none", n)
	}
}

// TestReleaseRecordTTL: the record of a release lives as long as the released lease would
// have, and at least 10 s (wire.RecordTTL), so that a release sent again after a lost reply
// finds it: a lock with a long lease, one with a short TTL (the client asks for 10 s), and a
// lock granted from the queue, whose lease starts at most 3 s long (the script keeps its
// record 10 s unasked).
func TestReleaseRecordTTL(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	ctx := t.Context()
	recordTTL := func(resource string) time.Duration {
		t.Helper()
		keys := r.Client.Keys(ctx, r.Prefix+"{"+resource+"}:r:*").Val()
		if len(keys) != 1 {
			t.Fatalf("%s: release records %v, want one", resource, keys)
		}
		return r.Client.PTTL(ctx, keys[0]).Val()
	}
	l := process(t, r)
	for _, c := range []struct {
		resource string
		ttl      time.Duration
		min, max time.Duration
	}{
		{"long", time.Minute, 50 * time.Second, time.Minute},
		{"short", 2 * time.Second, 9 * time.Second, 10 * time.Second},
	} {
		lock := mustAcquire(t, l, c.resource, fencing.WithTTL(c.ttl))
		if err := lock.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if got := recordTTL(c.resource); got < c.min || got > c.max {
			t.Errorf("%s (TTL %v): the record lives %v, want %v to %v", c.resource, c.ttl, got, c.min, c.max)
		}
	}
	held := mustAcquire(t, l, "res")
	granted := handOver(t, r, held, process(t, r), nil)
	for _, k := range r.Client.Keys(ctx, r.Prefix+"{res}:r:*").Val() {
		r.Client.Del(ctx, k) // the first holder's
	}
	if err := granted.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if got := recordTTL("res"); got < 9*time.Second || got > 10*time.Second {
		t.Errorf("a lock granted from the queue: the record lives %v, want 10 s", got)
	}
}

// TestQueueTTLAfterHandOff: the release that hands an exclusive lock to the head of its queue
// leaves the rest of the queue with its TTL (a queue whose waiters all died goes within 3 s),
// whether the head was exclusive or shared, when one waiter is left behind it.
func TestQueueTTLAfterHandOff(t *testing.T) {
	t.Parallel()
	for _, head := range []struct {
		name string
		opts []fencing.CallOption
	}{{"exclusive head", nil}, {"shared head", []fencing.CallOption{fencing.Shared()}}} {
		t.Run(head.name, func(t *testing.T) {
			r := redistest.New(t)
			ctx := t.Context()
			holder := process(t, r)
			first, second := process(t, r, slowBackoff), process(t, r, slowBackoff)
			held := mustAcquire(t, holder, "res")
			a := acquireAsync(ctx, first, "res", head.opts...)
			waitFor(t, 5*time.Second, "the first waiter in the queue", func() bool { return queueLen(r, "res") == 1 })
			b := acquireAsync(ctx, second, "res")
			waitFor(t, 5*time.Second, "the second waiter in the queue", func() bool { return queueLen(r, "res") == 2 })
			if err := held.Release(ctx); err != nil {
				t.Fatal(err)
			}
			got := <-a
			if got.err != nil {
				t.Fatal(got.err)
			}
			queue := r.Prefix + "{res}:queue"
			if n := r.Client.LLen(ctx, queue).Val(); n != 1 {
				t.Fatalf("queue length %d after the hand-off, want 1", n)
			}
			if ttl := r.Client.PTTL(ctx, queue).Val(); ttl <= 0 || ttl > 3*time.Second {
				t.Errorf("the queue's TTL after the hand-off: %v, want up to 3s", ttl)
			}
			if err := got.lock.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if got = <-b; got.err != nil {
				t.Fatal(got.err)
			}
			_ = got.lock.Release(ctx)
		})
	}
}
