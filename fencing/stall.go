package fencing

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/fencekit/fencekit/fencing/observe"
	"github.com/fencekit/fencekit/internal/wire"
)

// errNoHold is a door's error when ctx holds no lock of Do, DoAll or Lead.
var errNoHold = errors.New("the context holds no lock of Do, DoAll or Lead")

// door is what the test kit (fencingtest) reaches through a work context: a stall.Door.
type door struct{}

// holdsIn returns the holds of ctx, the innermost first.
func holdsIn(ctx context.Context) []*hold {
	var holds []*hold
	for h, _ := ctx.Value(heldKey{}).(*held); h != nil; h = h.outer {
		if h.hold != nil {
			holds = append(holds, h.hold)
		}
	}
	return holds
}

// pause stops the holds' renewals, not their work, and ends each lease in Redis and locally.
func pause(ctx context.Context, holds []*hold) []*Lock {
	var locks []*Lock
	for _, h := range holds {
		h.renewer.stop()
		locks = append(locks, h.locks...)
	}
	rctx := context.WithoutCancel(ctx)
	for _, k := range locks {
		k.stopLater()
		k.validUntil.Store(0)
		k.locker.release(rctx, &wire.Release{Keys: []wire.Keys{k.keys}, Values: []string{k.value}, Kind: k.kind})
		// Its own Release finds it gone, as after a lapsed lease, not this release's record.
		k.released.Store(true)
	}
	return locks
}

// Stall pauses every hold in ctx and returns once another acquisition has taken one of the
// resources (its counter moved past the holder's token), or with ctx.Err() when ctx ends.
func (door) Stall(ctx context.Context) error {
	holds := holdsIn(ctx)
	if len(holds) == 0 {
		return errNoHold
	}
	locks := pause(ctx, holds)
	rctx := context.WithoutCancel(ctx)
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

// Takeover pauses every hold in ctx and runs successor as the next holder of the innermost hold's
// resources, as Do or DoAll would, by the same Locker with its settings (no wait limit, no
// UnlessMemo), in a context of its own (no ctx's holds or values) that ends when ctx does.
func (door) Takeover(ctx context.Context, successor func(ctx context.Context) error) error {
	holds := holdsIn(ctx)
	if len(holds) == 0 {
		return errNoHold
	}
	if successor == nil {
		return invalidf("nil successor")
	}
	own := holds[0]
	l, cfg := own.locks[0].locker, *own.cfg
	cfg.maxWait, cfg.memo = -1, ""
	pause(ctx, holds)
	sctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	defer context.AfterFunc(ctx, cancel)()
	if own.set == nil {
		lock, err := l.acquire(sctx, &cfg, own.locks[0].resource)
		if err != nil {
			return err
		}
		return l.hold(sctx, &cfg, []*Lock{lock}, nil, successor)
	}
	resources := make([]string, len(own.locks))
	for i, k := range own.locks {
		resources[i] = k.resource
	}
	set, err := l.acquireAll(sctx, &cfg, observe.OpAcquireAll, resources)
	if err != nil {
		return err
	}
	return l.hold(sctx, &cfg, set.locks, set, successor)
}
