package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/store"
)

// TestReleaseFenced takes a lock with a Locker, force-releases it, takes it again, and
// shows that a store checking tokens refuses the old holder's write.
func TestReleaseFenced(t *testing.T) {
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
	})
}

// TestRelease covers the confirmation, the value check and the exit codes, with a golden
// transcript of a confirmed release.
func TestRelease(t *testing.T) {
	tg := sharedTarget(t)
	ctx := context.Background()
	prepare(t, tg.client, tg.prefix)
	lockKey := keysFor(tg.prefix, "with space").lock
	args := tg.args("release", "--force", "with space")

	t.Run("declined", func(t *testing.T) {
		r := runCLI(t, strings.NewReader("no\n"), 0, args...)
		if r.code != exitError || !strings.Contains(r.stdout, "Not released.") || !strings.Contains(r.stderr, "Type yes or no") {
			t.Errorf("exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
		}
		if n := tg.client.Exists(ctx, lockKey).Val(); n != 1 {
			t.Errorf("lock gone after no")
		}
		if r := runCLI(t, nil, 0, args...); r.code != exitError { // EOF: no answer
			t.Errorf("no answer: exit %d, want %d", r.code, exitError)
		}
	})
	t.Run("changed-meanwhile", func(t *testing.T) {
		// The answer arrives after another acquisition took the lock.
		stdin := readerFunc(func(p []byte) (int, error) {
			tg.client.Set(ctx, lockKey, "otherOOOOOOOOOOOOOOOOO:99", time.Minute)
			return copy(p, "yes\n"), io.EOF
		})
		r := runCLI(t, stdin, 0, args...)
		if r.code != exitError || !strings.Contains(r.stdout, "changed hands meanwhile (token 99 now)") {
			t.Errorf("exit %d, stdout %q", r.code, r.stdout)
		}
		if v := tg.client.Get(ctx, lockKey).Val(); v != "otherOOOOOOOOOOOOOOOOO:99" {
			t.Errorf("lock value %q: the new holder's lock was touched", v)
		}
		tg.client.Set(ctx, lockKey, ownerID+":1", 20*time.Minute+margin)
	})
	t.Run("confirmed", func(t *testing.T) {
		r := runCLI(t, strings.NewReader("yes\n"), 0, args...)
		if r.code != exitOK {
			t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
		}
		golden(t, "release.golden", r.stdout)
		if n := tg.client.Exists(ctx, lockKey).Val(); n != 0 {
			t.Errorf("lock still there")
		}
		tg.run(t, exitNotFound, "show", "with space")
	})
	t.Run("json", func(t *testing.T) {
		r := tg.run(t, exitOK, "release", "--force", "--yes", "--json", "{braced}")
		want := `"released": true`
		if !strings.Contains(r.stdout, want) || !strings.Contains(r.stdout, `"token": 3`) {
			t.Errorf("stdout %q, want %s and token 3", r.stdout, want)
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
		if n := tg.client.Exists(ctx, keysFor(tg.prefix, "order-42").lock).Val(); n != 1 {
			t.Errorf("lock released without --force")
		}
	})
}

type readerFunc func(p []byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }

// TestOddKeys checks that keys of an unexpected type or value do not stop a command: a
// queue that is a string, a lock value without a token, a waiter key with junk.
func TestOddKeys(t *testing.T) {
	tg := sharedTarget(t)
	ctx := context.Background()
	odd := keysFor(tg.prefix, "odd")
	junk := keysFor(tg.prefix, "junk")
	hash := keysFor(tg.prefix, "odd-hash")
	pipe := tg.client.Pipeline()
	pipe.Set(ctx, odd.lock, ownerID+":7", time.Hour)
	pipe.Set(ctx, odd.queue, "not a list", time.Hour)
	pipe.Set(ctx, junk.lock, "no-token-here", time.Hour)
	pipe.RPush(ctx, junk.queue, liveB) // an element without a lease: the scripts drop it
	pipe.Set(ctx, junk.waiter(liveB), "garbage", time.Hour)
	end := time.Now().Add(time.Hour).UnixMilli()
	pipe.HSet(ctx, hash.lock, "limit", "many", ownerID+":5", end)
	pipe.PExpire(ctx, hash.lock, time.Hour)
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	r := tg.run(t, exitOK, "locks", "--json")
	var got locksOutput
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Locks) != 3 {
		t.Fatalf("got %+v, want 3 locks", got.Locks)
	}
	for _, l := range got.Locks {
		switch l.Resource {
		case "odd":
			if l.Token != 7 || l.Waiters != 0 || l.Mode != modeExclusive {
				t.Errorf("odd: got %+v", l)
			}
		case "junk":
			if l.Token != 0 || l.Waiters != 1 || l.OldestWaitMs != nil || l.Value != "no-token-here" || l.Mode != modeExclusive {
				t.Errorf("junk: got %+v", l)
			}
		case "odd-hash":
			if l.Token != 5 || l.Mode != modeUnknown || l.Limit != 0 || len(l.Holders) != 1 {
				t.Errorf("odd-hash: got %+v", l)
			}
		}
	}
	tg.run(t, exitOK, "locks")
	r = tg.run(t, exitOK, "show", "junk")
	if !strings.Contains(r.stdout, "  0    "+liveB+"  ?     no    -      -      -\n") {
		t.Errorf("show junk: got\n%s", r.stdout)
	}
	r = tg.run(t, exitOK, "show", "--json", "junk")
	var show showOutput
	if err := json.Unmarshal([]byte(r.stdout), &show); err != nil {
		t.Fatal(err)
	}
	if e := show.Queue.Entries; len(e) != 1 || e[0].Mode != modeUnknown || e[0].LeaseMs != nil || e[0].Floor != nil || e[0].Live {
		t.Errorf("show --json junk: got %+v", e)
	}
	tg.run(t, exitOK, "show", "odd")
	r = tg.run(t, exitOK, "show", "odd-hash")
	if !strings.Contains(r.stdout, "Lock:        unknown mode") {
		t.Errorf("show odd-hash: got\n%s", r.stdout)
	}
	tg.run(t, exitOK, "stats")
	r = tg.run(t, exitOK, "release", "--force", "--yes", "junk")
	if !strings.Contains(r.stdout, `value "no-token-here" without a token`) || !strings.Contains(r.stdout, "had no token") {
		t.Errorf("release junk: stdout %q", r.stdout)
	}
	r = tg.run(t, exitOK, "release", "--force", "--yes", "odd-hash")
	if !strings.Contains(r.stdout, "Released a slot of \"odd-hash\": its holder had token 5") {
		t.Errorf("release odd-hash: stdout %q", r.stdout)
	}
}
