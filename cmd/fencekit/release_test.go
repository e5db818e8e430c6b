package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/internal/wire"
	"github.com/fencekit/fencekit/store"
)

// TestReleaseFenced takes a lock with a Locker, force-releases it, takes it again, and
// shows that a store checking tokens refuses the old holder's write.
func TestReleaseFenced(t *testing.T) {
	t.Parallel()
	forTargets(t, func(t *testing.T, tg target) {
		ctx := context.Background()
		l := fencing.New(tg.client, fencing.WithPrefix(tg.prefix))
		defer l.Close()
		const name = "job{7}/ünï code"
		var data store.Memory
		write := func(token int64) error { return data.Write(name, token, func() error { return nil }) }

		old, err := l.TryAcquire(ctx, name, fencing.WithTTL(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		if err := write(old.Token()); err != nil {
			t.Fatalf("old holder's first write: %v", err)
		}

		r := tg.run(t, exitOK, "release", "--force", "--yes", name)
		if want := fmt.Sprintf("its holder had token %d", old.Token()); !strings.Contains(r.stdout, want) {
			t.Errorf("stdout %q does not say %q", r.stdout, want)
		}

		next, err := l.TryAcquire(ctx, name, fencing.WithTTL(time.Hour))
		if err != nil {
			t.Fatalf("TryAcquire after the forced release: %v", err)
		}
		defer next.Release(ctx)
		if next.Token() <= old.Token() {
			t.Fatalf("next token %d, want above %d", next.Token(), old.Token())
		}
		if err := write(next.Token()); err != nil {
			t.Fatalf("next holder's write: %v", err)
		}
		if err := write(old.Token()); !errors.Is(err, store.ErrStaleToken) {
			t.Errorf("old holder's late write: got %v, want ErrStaleToken", err)
		}
		if err := old.Extend(ctx, time.Minute); !errors.Is(err, fencing.ErrNotHeld) {
			t.Errorf("old holder's Extend: got %v, want ErrNotHeld", err)
		}
		if err := old.Release(ctx); !errors.Is(err, fencing.ErrNotHeld) {
			t.Errorf("old holder's Release: got %v, want ErrNotHeld", err)
		}
	})
}

// TestRelease covers the confirmation, the holder check and the exit codes, with a golden
// transcript of a confirmed release.
func TestRelease(t *testing.T) {
	t.Parallel()
	tg := sharedTarget(t)
	ctx := context.Background()
	prepare(t, tg.client, tg.prefix)
	l := tg.locker(t)
	held := func(name string) bool {
		t.Helper()
		st, err := l.Inspect(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		return len(st.Holders) > 0
	}
	args := tg.args("release", "--force", "with space")

	t.Run("declined", func(t *testing.T) {
		r := runCLI(t, strings.NewReader("no\n"), 0, args...)
		if r.code != exitError || !strings.Contains(r.stdout, "Not released.") || !strings.Contains(r.stderr, "Type yes or no") {
			t.Errorf("exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
		}
		if !held("with space") {
			t.Errorf("lock gone after no")
		}
		if r := runCLI(t, nil, 0, args...); r.code != exitError { // EOF: no answer
			t.Errorf("no answer: exit %d, want %d", r.code, exitError)
		}
	})
	t.Run("changed-meanwhile", func(t *testing.T) {
		// The answer arrives after the lock changed hands: it was freed, and another
		// acquisition took it, with token 3.
		var next *fencing.Lock
		stdin := readerFunc(func(p []byte) (int, error) {
			if next == nil {
				if err := l.ForceRelease(ctx, "a:b:c", 2); err != nil {
					t.Error(err)
				}
				var err error
				if next, err = l.TryAcquire(ctx, "a:b:c", fencing.WithTTL(time.Minute)); err != nil {
					t.Error(err)
				}
			}
			return copy(p, "yes\n"), io.EOF
		})
		r := runCLI(t, stdin, 0, tg.args("release", "--force", "a:b:c")...)
		if r.code != exitError || !strings.Contains(r.stdout, "changed hands meanwhile (token 3 now)") {
			t.Errorf("exit %d, stdout %q", r.code, r.stdout)
		}
		if _, err := next.TTL(ctx); err != nil {
			t.Errorf("the new holder's lock was touched: %v", err)
		}
		if err := next.Release(ctx); err != nil {
			t.Error(err)
		}
	})
	t.Run("released-meanwhile", func(t *testing.T) {
		// The answer arrives after the lock was freed.
		stdin := readerFunc(func(p []byte) (int, error) {
			if held("ünïcode-ключ") {
				if err := l.ForceRelease(ctx, "ünïcode-ключ", 12); err != nil {
					t.Error(err)
				}
			}
			return copy(p, "yes\n"), io.EOF
		})
		r := runCLI(t, stdin, 0, tg.args("release", "--force", "--json", "ünïcode-ключ")...)
		var out releaseOutput
		if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
			t.Fatalf("%v in\n%s", err, r.stdout)
		}
		if r.code != exitNotFound || out.Released || out.Reason != "not found" || out.Token != 12 {
			t.Errorf("exit %d, got %+v", r.code, out)
		}
	})
	t.Run("confirmed", func(t *testing.T) {
		r := runCLI(t, strings.NewReader("yes\n"), 0, args...)
		if r.code != exitOK {
			t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
		}
		golden(t, "release.golden", r.stdout)
		if held("with space") {
			t.Errorf("lock still there")
		}
		tg.run(t, exitNotFound, "show", "with space")
	})
	t.Run("json", func(t *testing.T) {
		r := tg.run(t, exitOK, "release", "--force", "--yes", "--json", "{braced}")
		var out releaseOutput
		if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
			t.Fatalf("%v in\n%s", err, r.stdout)
		}
		want := releaseOutput{Resource: "{braced}", Released: true, Mode: modeExclusive, Value: wire.Value(ownerID, 3), Owner: ownerID, Token: 3}
		if out != want {
			t.Errorf("got %+v, want %+v", out, want)
		}
	})
	t.Run("shared-holder", func(t *testing.T) {
		r := tg.run(t, exitOK, "release", "--force", "--yes", "--token", "11", "report-7")
		golden(t, "release-shared.golden", r.stdout)
		r = tg.run(t, exitOK, "show", "report-7")
		if !strings.Contains(r.stdout, "shared by 1 holder\n  holder:    token 10,") {
			t.Errorf("show after the release: got\n%s", r.stdout)
		}
	})
	t.Run("not-found", func(t *testing.T) {
		r := tg.run(t, exitNotFound, "release", "--force", "--yes", "idle")
		if !strings.Contains(r.stdout, "No lock is held on \"idle\"") {
			t.Errorf("stdout %q", r.stdout)
		}
	})
	t.Run("needs-force", func(t *testing.T) {
		r := tg.run(t, exitUsage, "release", "--yes", "order-42")
		if !strings.Contains(r.stderr, "needs --force") {
			t.Errorf("stderr %q", r.stderr)
		}
		if !held("order-42") {
			t.Errorf("lock released without --force")
		}
	})
	t.Run("name-too-long", func(t *testing.T) {
		r := tg.run(t, exitUsage, "release", "--force", "--yes", strings.Repeat("x", fencing.MaxResourceLen+1))
		if !strings.Contains(r.stderr, "invalid argument") {
			t.Errorf("stderr %q", r.stderr)
		}
	})
}

// TestReleaseGrantsWaiter force-releases a lock that a waiter of another Locker queues for:
// the release hands the lock to the waiter in the same step, as the holder's own Release
// would. Right after the command, Inspect finds it held by the waiter's queue element with
// the next token and nobody queued, and the waiter's Acquire returns with that lock at once,
// woken by the grant's announcement rather than by its poll (every second here).
func TestReleaseGrantsWaiter(t *testing.T) {
	t.Parallel()
	forTargets(t, func(t *testing.T, tg target) {
		ctx := context.Background()
		holder := tg.locker(t)
		old, err := holder.TryAcquire(ctx, "job-1", fencing.WithTTL(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		waiter := tg.locker(t, fencing.WithRetryBackoff(time.Second, time.Second))
		type acquired struct {
			lock *fencing.Lock
			err  error
			at   time.Time
		}
		got := make(chan acquired, 1)
		done := make(chan struct{})
		wctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		go func() {
			defer close(done)
			lock, err := waiter.Acquire(wctx, "job-1", fencing.WithTTL(time.Hour))
			got <- acquired{lock, err, time.Now()}
		}()
		waitQueued(t, holder, "job-1", 1, done)
		st, err := holder.Inspect(ctx, "job-1")
		if err != nil {
			t.Fatal(err)
		}
		id := st.Waiters[0].Locker

		tg.run(t, exitOK, "release", "--force", "--yes", "job-1")
		ran := time.Now()
		st, err = holder.Inspect(ctx, "job-1")
		if err != nil {
			t.Fatal(err)
		}
		if len(st.Holders) != 1 || st.Holders[0].Token != old.Token()+1 || !strings.HasPrefix(st.Holders[0].Owner, id+".") || len(st.Waiters) != 0 {
			t.Errorf("right after the release: got %+v; want the waiter of Locker %s holding token %d, nobody queued", st, id, old.Token()+1)
		}
		a := <-got
		if a.err != nil {
			t.Fatalf("the waiter's Acquire: %v", a.err)
		}
		defer a.lock.Release(ctx)
		if a.lock.Token() != old.Token()+1 {
			t.Errorf("the waiter's token: got %d, want %d", a.lock.Token(), old.Token()+1)
		}
		if d := a.at.Sub(ran); d > 500*time.Millisecond {
			t.Errorf("the waiter's Acquire returned %v after the release, want at once", d)
		}
		if err := old.Extend(ctx, time.Hour); !errors.Is(err, fencing.ErrNotHeld) {
			t.Errorf("the old holder's Extend: got %v, want ErrNotHeld", err)
		}
	})
}

type readerFunc func(p []byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }

// TestOddKeys checks that keys a Locker does not write, or that an earlier version wrote, do
// not stop a command: a queue that is a string (locks skips the resource and says so; show
// fails), a lock value without a token and an unreadable queue element (a resource Inspect
// finds free, which locks leaves out), shared and limited hashes of the earlier key layout
// (shown, but release refuses to change them), and a lock hash that outlived its last holder,
// with and without a dead waiter queued.
func TestOddKeys(t *testing.T) {
	t.Parallel()
	tg := sharedTarget(t)
	ctx := context.Background()
	odd := wire.For(tg.prefix, "odd")
	junk := wire.For(tg.prefix, "junk")
	oldHash := wire.For(tg.prefix, "old-hash")
	oldShared := wire.For(tg.prefix, "old-shared")
	end := strconv.FormatInt(time.Now().Add(time.Hour).UnixMilli(), 10)
	pipe := tg.client.Pipeline()
	pipe.Set(ctx, odd.Lock, wire.Value(ownerID, 7), time.Hour)
	pipe.Set(ctx, odd.Queue, "not a list", time.Hour)
	pipe.Set(ctx, junk.Lock, "no-token-here", time.Hour)
	pipe.RPush(ctx, junk.Queue, liveB) // an element without a lease: the scripts drop it
	pipe.Set(ctx, junk.Waiter(liveB), "garbage", time.Hour)
	// The earlier layout: a field limit, and holders "<owner>:<token>" holding their lease's end.
	pipe.HSet(ctx, oldHash.Lock, "limit", "many", wire.Value(ownerID, 5), end)
	pipe.PExpire(ctx, oldHash.Lock, time.Hour)
	pipe.HSet(ctx, oldShared.Lock, "limit", "shared", "until", end, wire.Value(ownerID, 6), end)
	pipe.PExpire(ctx, oldShared.Lock, time.Hour)
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	// Hashes that outlive their last holder: one with a dead waiter queued, one without.
	l := tg.locker(t)
	for _, name := range []string{"lingering", "free-waiters"} {
		lock, err := l.TryAcquire(ctx, name, fencing.Shared(), fencing.WithTTL(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		if err := lock.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := tg.client.RPush(ctx, wire.For(tg.prefix, "free-waiters").Queue, element(deadID, 1, 3000, false, 0, exclusive)).Err(); err != nil {
		t.Fatal(err)
	}

	r := tg.run(t, exitOK, "locks", "--json")
	var got locksOutput
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(r.stderr, "skipped") || !strings.Contains(r.stderr, `"odd"`) {
		t.Errorf("locks: stderr %q, want odd skipped", r.stderr)
	}
	names := map[string]lockInfo{}
	for _, l := range got.Locks {
		names[l.Resource] = l
	}
	if len(got.Locks) != 3 {
		t.Errorf("got %+v, want old-hash, old-shared and free-waiters", got.Locks)
	}
	if l := names["old-hash"]; l.Token != 5 || l.Mode != modeUnknown || l.Limit != 0 || len(l.Holders) != 1 {
		t.Errorf("old-hash: got %+v", l)
	}
	if l := names["old-shared"]; l.Token != 6 || l.Mode != modeShared || len(l.Holders) != 1 || l.Holders[0].Owner != ownerID {
		t.Errorf("old-shared: got %+v", l)
	}
	if l := names["free-waiters"]; l.Mode != modeFree || l.Token != 0 || l.TTLMs != -2 || l.Waiters != 1 || l.OldestWaitMs != nil || l.Holders != nil {
		t.Errorf("free-waiters: got %+v", l)
	}
	r = tg.run(t, exitOK, "locks")
	if !strings.Contains(r.stdout, "free-waiters  free    -      -      -           1        -            -\n") || !strings.HasSuffix(r.stdout, "2 lock(s) held; 1 resource free with waiters queued\n") {
		t.Errorf("locks: got\n%s", r.stdout)
	}

	r = tg.run(t, exitError, "show", "odd")
	if !strings.Contains(r.stderr, "WRONGTYPE") {
		t.Errorf("show odd: stderr %q", r.stderr)
	}
	tg.run(t, exitNotFound, "show", "junk")
	r = tg.run(t, exitOK, "show", "old-hash")
	if !strings.Contains(r.stdout, "Lock:        unknown mode") {
		t.Errorf("show old-hash: got\n%s", r.stdout)
	}
	r = tg.run(t, exitNotFound, "show", "free-waiters")
	if !strings.Contains(r.stdout, "Queue:       1 waiter(s) queued, 0 alive\n") {
		t.Errorf("show free-waiters: got\n%s", r.stdout)
	}
	tg.run(t, exitOK, "stats")
	tg.run(t, exitNotFound, "release", "--force", "--yes", "junk")
	for _, name := range []string{"old-hash", "old-shared"} {
		r = tg.run(t, exitError, "release", "--force", "--yes", name)
		if !strings.Contains(r.stderr, "earlier fencekit version") {
			t.Errorf("release %s: stderr %q", name, r.stderr)
		}
	}
}
