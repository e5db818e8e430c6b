package redistest

import (
	"context"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// Trips counts a client's round trips: each command or pipeline sent, but for the handshake
// of a new connection. Add it with AddHook.
type Trips struct{ n atomic.Int64 }

// Load returns the round trips counted so far.
func (c *Trips) Load() int64 { return c.n.Load() }

func (c *Trips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *Trips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !handshake(cmd) {
			c.n.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (c *Trips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) > 0 && !handshake(cmds[0]) {
			c.n.Add(1)
		}
		return next(ctx, cmds)
	}
}

// handshake reports whether cmd is part of a new connection's handshake, which go-redis sends
// through the hooks too.
func handshake(cmd redis.Cmder) bool {
	switch cmd.Name() {
	case "hello", "client", "auth", "select":
		return true
	}
	return false
}
