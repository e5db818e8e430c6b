package fencing

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestLeaseSeen checks when the front waiter checks again after a poll saw the holder's lease:
// as it ends, at once when PTTL said 0 (a lease ending within the millisecond: waiting for the
// next poll would hold a dead holder's resource up for a poll period more), and at the next
// poll when the lock has no lease.
func TestLeaseSeen(t *testing.T) {
	t.Parallel()
	const poll = time.Second
	for _, tc := range []struct {
		name string
		left time.Duration
		max  time.Duration // the next check comes within it
		min  time.Duration // and not before it
	}{
		{"lease left", 300 * time.Millisecond, 301 * time.Millisecond, 301 * time.Millisecond},
		{"ends within the millisecond", 0, time.Millisecond, time.Millisecond},
		{"no lease", -time.Millisecond, poll, poll},
		{"longer than a poll", time.Hour, poll, poll},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ln := &line{}
			w := &waiter{}
			ln.waiters = []*waiter{w}
			now := time.Now()
			ln.leaseSeen(now, tc.left)
			if d := ln.nextPoll(w, poll, now); d > tc.max || d < tc.min {
				t.Errorf("next check in %v, want %v to %v", d, tc.min, tc.max)
			}
			if other := (&waiter{}); ln.nextPoll(other, poll, now) != poll {
				t.Error("a waiter that is not the front one checks before its next poll")
			}
		})
	}
}

// redisErr is an error reply as go-redis returns it: a type with a RedisError method.
type redisErr string

func (e redisErr) Error() string { return string(e) }
func (redisErr) RedisError()     {}

// TestPassing checks which errors a queued waiter rides out (see Locker.Acquire).
func TestPassing(t *testing.T) {
	t.Parallel()
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{refused, true},
		{fmt.Errorf("poll: %w", refused), true},
		{io.EOF, true},
		{io.ErrUnexpectedEOF, true},
		{redis.ErrPoolTimeout, true},
		{context.DeadlineExceeded, true}, // a timeout of go-redis's own (ContextTimeoutEnabled)
		{redisErr("LOADING Redis is loading the dataset in memory"), true},
		{redisErr("READONLY You can't write against a read only replica."), true},
		{redisErr("CLUSTERDOWN The cluster is down"), true},
		{redisErr("MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'."), true},
		{redisErr("TRYAGAIN Multiple keys request during rehashing of slot"), true},
		{redisErr("BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE."), true},
		{redisErr("ERR max number of clients reached"), true},
		{redisErr("MOVED 3999 127.0.0.1:6381"), true},
		{redisErr("ASK 3999 127.0.0.1:6381"), true},
		{redisErr("NOPERM this user has no permissions to run the 'evalsha' command"), false},
		{redisErr("BUSYKEY Target key name already exists."), false},
		{redisErr("WRONGTYPE Operation against a key holding the wrong kind of value"), false},
		{redisErr("OOM command not allowed when used memory > 'maxmemory'."), false},
		{redisErr("ERR user_script:1: Script attempted to access nonexistent global variable"), false},
		{redis.ErrClosed, false},
		{context.Canceled, false},
		{errors.New("fencing: not held"), false},
		{errors.New("fencing: bad token"), false},
	} {
		if got := passing(tc.err); got != tc.want {
			t.Errorf("passing(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
