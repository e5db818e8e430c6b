// Package redistest gives tests a Redis: an embedded miniredis by default, or the real
// server named by FENCING_REDIS_ADDR, with a key prefix of its own for every test.
package redistest

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// EnvAddr names the environment variable that points the tests at a real Redis.
const EnvAddr = "FENCING_REDIS_ADDR"

// realDB is the database the tests use on a real Redis, away from DB 0.
const realDB = 9

var seq atomic.Int64

// Redis is one test's Redis.
type Redis struct {
	// Client is connected to the server; it is closed when the test ends.
	Client *redis.Client
	// Prefix is unique to the test, also across processes, and ends in ':'; it contains no
	// '{' or '}'.
	Prefix string
	// Mini is the embedded server, or nil on a real Redis.
	Mini *miniredis.Miniredis
	// Addr is the server's host:port.
	Addr string
	// DB is the database number the client uses.
	DB int
}

// Real reports whether the tests run against a real Redis.
func Real() bool { return os.Getenv(EnvAddr) != "" }

// New returns a Redis for t: miniredis unless FENCING_REDIS_ADDR is set.
func New(t testing.TB) *Redis {
	t.Helper()
	// The process id keeps apart tests of the same name in packages that go test runs at
	// once (the Echo adapters share their behaviour suite).
	r := &Redis{Prefix: fmt.Sprintf("fktest:%s:%d:%d:", sanitize(t.Name()), os.Getpid(), seq.Add(1))}
	if addr := os.Getenv(EnvAddr); addr != "" {
		r.Addr, r.DB = addr, realDB
	} else {
		r.Mini = miniredis.RunT(t)
		r.Addr = r.Mini.Addr()
	}
	r.Client = r.NewClient(t)
	if err := r.Client.Ping(context.Background()).Err(); err != nil {
		t.Fatalf("redistest: ping %s: %v", r.Addr, err)
	}
	if r.Mini == nil {
		t.Cleanup(func() { r.deleteKeys(t) })
	}
	return r
}

// NewClient returns another client for the same server and database, closed when the test ends.
func (r *Redis) NewClient(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewClient(r.Options())
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Options returns client options for the server. On miniredis, a server inside the test
// process, the timeouts are a minute: on a loaded machine its replies can take longer than
// go-redis's 3s, and such a timeout is a reply lost on the wire, which only the tests that
// inject one mean to test.
func (r *Redis) Options() *redis.Options {
	o := &redis.Options{Addr: r.Addr, DB: r.DB, DisableIdentity: true}
	if r.Mini != nil {
		o.ReadTimeout, o.WriteTimeout = time.Minute, time.Minute
	}
	return o
}

// Advance lets d pass for the server's TTLs: FastForward on miniredis, a real wait on Redis.
func (r *Redis) Advance(d time.Duration) {
	if r.Mini != nil {
		r.Mini.FastForward(d)
		return
	}
	time.Sleep(d)
}

// RealTime makes the server's TTLs run out as a real server's do, with the wall clock, until the
// test ends: on miniredis, whose TTLs move only with FastForward, a goroutine moves them every
// 50ms; on Redis, it does nothing. For tests of many waiters, where a lease no one renews (a
// lock whose release timed out, a grant no waiter took) must end as it would in production.
func (r *Redis) RealTime(t testing.TB) {
	if r.Mini == nil {
		return
	}
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		last := time.Now()
		for {
			select {
			case <-stop:
				return
			case now := <-tick.C:
				r.Mini.FastForward(now.Sub(last))
				last = now
			}
		}
	}()
	t.Cleanup(func() { close(stop); <-done })
}

// deleteKeys removes the test's keys with a fresh context (t.Context is done by cleanup time).
func (r *Redis) deleteKeys(t testing.TB) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := redis.NewClient(r.Options())
	defer c.Close()
	// One UNLINK per page of SCAN: a test may leave thousands of keys, and one DEL each
	// took longer than the cleanup's time on a loaded machine.
	for cursor := uint64(0); ; {
		keys, next, err := c.Scan(ctx, cursor, r.Prefix+"*", 1000).Result()
		if err == nil && len(keys) > 0 {
			err = c.Unlink(ctx, keys...).Err()
		}
		if err != nil {
			t.Logf("redistest: cleanup: %v", err)
			return
		}
		if cursor = next; cursor == 0 {
			return
		}
	}
}

func sanitize(name string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_', r == '-':
			return r
		}
		return '_'
	}, name)
}
