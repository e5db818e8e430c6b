package fencing_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/internal/testkit/redistest"
)

// TestLostSetReplies loses the reply to the multi-acquire script and to the multi-release
// script on the wire, with and without go-redis retrying: no resource is left held by nobody,
// and no token is issued twice.
func TestLostSetReplies(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	if r.Mini != nil {
		t.Skip("miniredis drops a command whose connection closes before the reply; runs with FENCING_REDIS_ADDR")
	}
	ctx := t.Context()
	script := func(sha string) func([]byte) bool {
		return func(p []byte) bool { return bytes.Contains(p, []byte(sha)) }
	}
	client := func(t *testing.T, retries int, match func([]byte) bool) (*fencing.Locker, *atomic.Bool, *atomic.Int32) {
		armed, dropped := new(atomic.Bool), new(atomic.Int32)
		opts := r.Options()
		opts.MaxRetries = retries
		opts.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return &dropOnce{Conn: c, armed: armed, dropped: dropped, match: match}, nil
		}
		c := redis.NewClient(opts)
		t.Cleanup(func() { _ = c.Close() })
		l := fencing.New(c, fencing.WithPrefix(r.Prefix))
		t.Cleanup(func() { _ = l.Close() })
		// Load the scripts first, so that the armed request is the EVALSHA.
		warm, err := l.TryAcquireAll(ctx, []string{"warm-a", "warm-b"})
		if err != nil {
			t.Fatal(err)
		}
		if err := warm.Release(ctx); err != nil {
			t.Fatal(err)
		}
		return l, armed, dropped
	}
	counter := func(res string) int64 {
		n, _ := r.Client.Get(ctx, r.Prefix+"{"+res+"}:fence").Int64()
		return n
	}

	t.Run("acquire/retried", func(t *testing.T) {
		l, armed, dropped := client(t, 3, script(fencing.AcquireAllSHA()))
		armed.Store(true)
		set, err := l.TryAcquireAll(ctx, []string{"ra", "rb"})
		if dropped.Load() != 1 {
			t.Fatalf("the acquire reply was not dropped (%v)", err)
		}
		if err != nil {
			t.Fatalf("TryAcquireAll: got %v, want the set: the retry finds the locks its first run took", err)
		}
		// The retry took no new token: the first run's locks are the set's.
		for _, res := range []string{"ra", "rb"} {
			if set.Token(res) != 1 || counter(res) != 1 {
				t.Fatalf("%s: token %d, counter %d; want 1 and 1 (no token issued twice)", res, set.Token(res), counter(res))
			}
		}
		if err := set.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if lockExists(t, r, "ra") || lockExists(t, r, "rb") {
			t.Fatal("a lock left after Release")
		}
	})

	t.Run("acquire/not-retried", func(t *testing.T) {
		l, armed, dropped := client(t, -1, script(fencing.AcquireAllSHA()))
		armed.Store(true)
		set, err := l.TryAcquireAll(ctx, []string{"na", "nb"})
		if dropped.Load() != 1 {
			t.Fatalf("the acquire reply was not dropped (%v)", err)
		}
		if err == nil || set != nil {
			t.Fatalf("TryAcquireAll: got %v, %v; want the connection's error", set, err)
		}
		// The script ran and took both locks; the call freed them before returning.
		if lockExists(t, r, "na") || lockExists(t, r, "nb") {
			t.Fatal("a lock left held by nobody after a lost reply")
		}
		again, err := l.TryAcquireAll(ctx, []string{"na", "nb"})
		if err != nil {
			t.Fatalf("TryAcquireAll after the lost reply: %v", err)
		}
		if again.Token("na") != 2 || again.Token("nb") != 2 {
			t.Fatalf("tokens %d %d, want 2 2", again.Token("na"), again.Token("nb"))
		}
		if err := again.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("release/retried", func(t *testing.T) {
		l, armed, dropped := client(t, 3, script(fencing.ReleaseSHA()))
		set, err := l.TryAcquireAll(ctx, []string{"xa", "xb"})
		if err != nil {
			t.Fatal(err)
		}
		armed.Store(true)
		err = set.Release(ctx)
		if dropped.Load() != 1 {
			t.Fatalf("the release reply was not dropped (%v)", err)
		}
		if err != nil {
			t.Fatalf("Release: got %v, want nil: its first run deleted the locks", err)
		}
		if lockExists(t, r, "xa") || lockExists(t, r, "xb") {
			t.Fatal("a lock left after the release")
		}
		if err := set.Release(ctx); !errors.Is(err, fencing.ErrNotHeld) {
			t.Fatalf("second Release: got %v, want ErrNotHeld", err)
		}
	})

	t.Run("release/not-retried", func(t *testing.T) {
		l, armed, dropped := client(t, -1, script(fencing.ReleaseSHA()))
		set, err := l.TryAcquireAll(ctx, []string{"ya", "yb"})
		if err != nil {
			t.Fatal(err)
		}
		armed.Store(true)
		err = set.Release(ctx)
		if dropped.Load() != 1 {
			t.Fatalf("the release reply was not dropped (%v)", err)
		}
		// Not retried by go-redis, the release is sent again on a new connection, where the
		// release records say the first run deleted them.
		if err != nil {
			t.Fatalf("Release: got %v, want nil", err)
		}
		if lockExists(t, r, "ya") || lockExists(t, r, "yb") {
			t.Fatal("a lock left after the release")
		}
	})
}
