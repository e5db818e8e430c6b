package fencing

import (
	"context"
	"errors"
	"net"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/fencing/observe"
	"github.com/fencekit/fencekit/internal/wire"
)

// The model test's environment: the clock, the loss of replies, and the two hooks into a
// Locker's internals that make its background work run at a step of the test instead of at
// a moment of its own choosing.

// modelClock is the model's time. On miniredis it moves only when the test moves it
// (FastForward for the TTLs, SetTime for TIME); on a real Redis it is the wall clock, and
// tol is how close to a lease's end the model treats the holder as neither alive nor gone.
type modelClock struct {
	mini  *miniredis.Miniredis
	base  time.Time     // miniredis: TIME at model time 0
	at    time.Duration // miniredis: the model time
	start time.Time     // real Redis: model time 0
	tol   time.Duration // real Redis: the margin around a lease's end
}

func (c *modelClock) now() time.Duration {
	if c.mini != nil {
		return c.at
	}
	return time.Since(c.start)
}

// advance lets d pass: on miniredis at once, on a real Redis by waiting.
func (c *modelClock) advance(d time.Duration) {
	if c.mini == nil {
		time.Sleep(d)
		return
	}
	c.at += d
	c.mini.FastForward(d)
	c.mini.SetTime(c.base.Add(c.at))
}

// errReplyLost is the error of a reply that a dropper lost.
var errReplyLost = errors.New("model: the reply was lost on the wire")

// dropper is a go-redis hook that loses the reply of one command it is armed for: the server
// runs the command, and then either the client sees a network error (no retry) or the
// command is sent once more and its second reply comes back (go-redis's retry after a lost
// reply, which sends the same command again on a new connection). A pipeline counts as one
// command: it matches when one of its commands does, and loses all its replies.
type dropper struct {
	mu    sync.Mutex
	match func(redis.Cmder) bool // nil: disarmed
	retry bool
	fired bool
}

// arm makes the next command that match accepts lose its reply.
func (d *dropper) arm(match func(redis.Cmder) bool, retry bool) {
	d.mu.Lock()
	d.match, d.retry, d.fired = match, retry, false
	d.mu.Unlock()
}

// disarm disarms d and reports whether it lost a reply since arm.
func (d *dropper) disarm() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.match = nil
	return d.fired
}

// take reports whether cmds match, disarming d when they do, and whether to retry.
func (d *dropper) take(cmds ...redis.Cmder) (hit, retry bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.match == nil {
		return false, false
	}
	for _, c := range cmds {
		if d.match(c) {
			d.match, d.fired = nil, true
			return true, d.retry
		}
	}
	return false, false
}

func (d *dropper) DialHook(next redis.DialHook) redis.DialHook { return next }

func (d *dropper) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		hit, retry := d.take(cmd)
		if !hit {
			return next(ctx, cmd)
		}
		if err := next(ctx, cmd); wire.NoScript(err) {
			// The server ran nothing: answer as it did, and lose the reply of the EVAL
			// that follows instead.
			d.rearm(cmd)
			return err
		}
		if retry {
			return next(ctx, cmd)
		}
		err := &net.OpError{Op: "read", Net: "tcp", Err: errReplyLost}
		cmd.SetErr(err)
		return err
	}
}

func (d *dropper) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		hit, retry := d.take(cmds...)
		if !hit {
			return next(ctx, cmds)
		}
		_ = next(ctx, cmds)
		for _, c := range cmds {
			if wire.NoScript(c.Err()) {
				d.rearm(c)
				return nil
			}
		}
		if retry {
			return next(ctx, cmds)
		}
		err := &net.OpError{Op: "read", Net: "tcp", Err: errReplyLost}
		for _, c := range cmds {
			c.SetErr(err)
		}
		return err
	}
}

// rearm arms d again for the EVAL of the script whose EVALSHA cmd was.
func (d *dropper) rearm(cmd redis.Cmder) {
	args := cmd.Args()
	d.mu.Lock()
	defer d.mu.Unlock()
	d.fired = false
	d.match = func(c redis.Cmder) bool {
		a := c.Args()
		return len(a) > 3 && len(args) > 3 && a[0] == "eval" && a[3] == args[3] && sameScript(a[1], args[1])
	}
}

// verbScripts are the scripts of each verb whose replies the model test loses: an exclusive
// call's and a shared or limited one's.
var verbScripts = map[string][]*wire.Script{
	"acquire":    {wire.Scripts["acquire.lua"], wire.Scripts["shared_acquire.lua"]},
	"acquireall": {wire.Scripts["acquireall.lua"]},
	"release":    {wire.Scripts["release.lua"], wire.Scripts["shared_release.lua"]},
	"extend":     {wire.Scripts["extend.lua"], wire.Scripts["shared_extend.lua"]},
}

// scriptCmd returns a matcher of the EVALSHA or EVAL of a script of verb whose first key is
// key.
func scriptCmd(verb, key string) func(redis.Cmder) bool {
	return func(c redis.Cmder) bool {
		a := c.Args()
		if len(a) < 4 || (a[0] != "evalsha" && a[0] != "eval") || a[3] != key {
			return false
		}
		for _, s := range verbScripts[verb] {
			if s.Is(a[1]) {
				return true
			}
		}
		return false
	}
}

// sameScript reports whether a and b, second arguments of EVAL or EVALSHA, are one script's.
func sameScript(a, b any) bool {
	for _, s := range wire.Scripts {
		if s.Is(a) && s.Is(b) {
			return true
		}
	}
	return false
}

// pollNow makes every waiter of l that is the front of its line check with Redis now, as its
// poll would when the holders' lease ends, and returns when the checks are done.
func pollNow(ctx context.Context, l *Locker) error { return l.room.checkNow(ctx) }

// aged makes l behave as a process whose clock moved on with the server's (the model's time
// jumps as a process's pause does): its next join writes its waiter key again.
func aged(l *Locker) { l.room.age() }

// lapsed reports whether err, of a call on k, says that k's lease ran out, and k's own
// deadline (from when its acquisition or grant was sent, less a margin) had passed by then:
// a lease Redis lost any earlier is a fault of the protocol.
func lapsed(k *Lock, err error) bool {
	return errors.Is(err, ErrNotHeld) && !time.Now().Before(k.deadline())
}

// settleLock runs a lock's deferred extension now, when one is pending (a grant's lease
// shorter than the TTL), and reports whether it ran.
func settleLock(ctx context.Context, k *Lock) (bool, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.later == nil {
		return false, nil
	}
	k.later.Stop()
	k.later = nil
	return true, k.extend(ctx, k.laterTTL, observe.OpRenew)
}

// queuedOn returns how many of l's waiters are queued in resource's line.
func queuedOn(l *Locker, resource string) int {
	return l.room.queuedFor(wire.For(l.cfg.prefix, resource))
}
