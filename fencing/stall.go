package fencing

import (
	"context"
	"errors"
	"strconv"
	"time"
)

// errNoHold is stallHolds's error when ctx holds no lock of Do, DoAll or Lead.
var errNoHold = errors.New("the context holds no lock of Do, DoAll or Lead")

// stallHolds makes every hold in ctx behave as a process paused past its lease, for
// fencingtest.Stall: its renewals stop (without cancelling the work), each lease ends in Redis
// (the resource goes to its next waiters, as after a lapsed lease and a waiter's check) and by
// the local clock, and stall returns once another acquisition has taken one of the
// resources (its counter moved past the holder's token), or with ctx.Err() when ctx ends.
func stallHolds(ctx context.Context) error {
	var holds []*hold
	for h, _ := ctx.Value(heldKey{}).(*held); h != nil; h = h.outer {
		if h.hold != nil {
			holds = append(holds, h.hold)
		}
	}
	if len(holds) == 0 {
		return errNoHold
	}
	var locks []*Lock
	for _, h := range holds {
		h.renewer.stop()
		locks = append(locks, h.locks...)
	}
	rctx := context.WithoutCancel(ctx)
	for _, k := range locks {
		k.stopLater()
		k.validUntil.Store(0)
		_, _ = k.locker.releaseOne(rctx, k.keys, k.value, k.mode, false, nil)
		// Its release record would answer the holder's own release later as a retry's:
		// the lock is gone, as after a lapsed lease.
		k.released.Store(true)
	}
	for wait := time.Millisecond; ; wait = min(2*wait, 50*time.Millisecond) {
		for _, k := range locks {
			v, err := k.locker.client.Get(rctx, k.keys.Fence).Result()
			if n, perr := strconv.ParseInt(v, 10, 64); err == nil && perr == nil && n > k.token {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
	}
}
