package fencing

import (
	"context"
	"errors"
	"time"

	"github.com/fencekit/fencekit/fencing/internal/backoff"
	"github.com/fencekit/fencekit/fencing/internal/room"
	"github.com/fencekit/fencekit/internal/wire"
)

// Waiting: Acquire's loop around the room (room.Wait), and take, which turns the room's grant
// into a Lock.

// wait is Acquire's loop: one attempt, unless this Locker waits on the resource already;
// then the room's wait, whose grant take turns into the Lock. It returns how many scripts it
// sent for the hooks.
func (l *Locker) wait(ctx context.Context, cfg *config, resource string) (*Lock, int, error) {
	k := wire.For(cfg.prefix, resource)
	m := []member{{name: resource, keys: k}}
	parent, attempts, begin := ctx, 0, time.Now()
	if cfg.maxWait >= 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cfg.maxWait)
		defer cancel()
	}
	call := room.Call{Keys: k, Kind: cfg.mode, TTL: time.Duration(millis(cfg.ttl)) * time.Millisecond, Floor: cfg.timeFloor, Expiry: cfg.expiry, Label: cfg.label}
	// The uncontended path: one script and no subscription, unless this Locker already waits
	// on the resource, subscribed.
	if cfg.maxWait == 0 || !l.room.Listening(k) {
		attempts++
		locks, r, err := l.attempt(parent, cfg, m, "", "")
		switch {
		case err != nil:
			return nil, attempts, opErr("acquire", resource, err)
		case len(locks) > 0:
			return locks[0], attempts, nil
		case cfg.maxWait == 0:
			return nil, attempts, r.busy
		}
		call.Seen, call.Left = time.Now(), r.busy.RetryAfter
	}
	var taken *Lock // the lock the join's script took, when the resource had become free
	call.Join = func(ctx context.Context, elem, entry string) (room.Joined, error) {
		attempts++
		sent := time.Now()
		locks, r, err := l.attempt(ctx, cfg, m, elem, entry)
		if err != nil {
			return room.Joined{}, opErr("acquire", resource, err)
		}
		if len(locks) > 0 {
			taken = locks[0]
			return room.Joined{Taken: &room.Grant{Taken: true}}, nil
		}
		return room.Joined{Sent: sent, Held: r.held, Left: r.left}, nil
	}
	call.Checked = func() { attempts++ }
	for {
		g, err := l.room.Wait(ctx, parent, call)
		if err != nil {
			return nil, attempts, l.waitErr(parent, resource, begin, err)
		}
		if g.Taken {
			return taken, attempts, nil
		}
		lock, err := l.take(parent, cfg, resource, k, g)
		if err == errLapsed {
			continue // the grant's lease ran out before it was confirmed: queue again
		}
		return lock, attempts, err
	}
}

// waitErr returns the error of a wait that the room ended with err.
func (l *Locker) waitErr(parent context.Context, resource string, begin time.Time, err error) error {
	var e *room.Ended
	var kind *room.KindError
	switch {
	case errors.As(err, &e):
		b := &BusyError{Resource: resource, RetryAfter: max(e.Left, 0), Waited: time.Since(begin), Ahead: e.Ahead}
		switch {
		case isDone(l.done):
			return ErrClosed
		case parent.Err() != nil:
			return join(join(b, parent.Err()), e.Last)
		}
		return join(b, e.Last) // WithMaxWait ran out
	case errors.Is(err, room.ErrClosed):
		return ErrClosed
	case errors.As(err, &kind):
		return invalidf("this Locker waits for the resource as %s, this call %s", kindName(kind.Have), kindName(kind.Want))
	case errors.Is(err, room.ErrLayout):
		return opErr("acquire", resource, err)
	}
	return err
}

// errLapsed is take's error when the grant had lapsed: the caller queues again.
var errLapsed = errors.New("fencing: grant lapsed")

// take turns a grant into a Lock, or returns errLapsed. A grant's lease is the TTL, or
// room.GrantLease when the TTL is longer: when the local clock shows at least half of it left,
// take returns at once, and a lease shorter than the TTL is extended to it off the hand-off
// path (see Lock.extendLater; Do's renewals take it over). Otherwise, and always with
// WithReplicas (whose WAIT must come first), it extends the lock to the TTL before it
// returns, through errors that can pass while the grant's lease lasts.
func (l *Locker) take(ctx context.Context, cfg *config, resource string, k wire.Keys, g room.Grant) (*Lock, error) {
	lock := &Lock{locker: l, hooks: cfg.hooks, resource: resource, keys: k, mode: cfg.mode, value: g.Value, token: g.Token, acquired: time.Now()}
	lock.setValidUntil(g.Start, g.Lease)
	if cfg.replicas == 0 && time.Until(lock.deadline()) > g.Lease/2 {
		if ttl := time.Duration(millis(cfg.ttl)) * time.Millisecond; ttl > g.Lease {
			lock.extendLater(ttl)
		}
		return lock, nil
	}
	err := l.confirm(ctx, cfg, lock)
	// An error that can pass is tried again while the grant's lease lasts.
	for retry := backoff.New(retryFirst, retryMost); room.Passing(err) && time.Until(lock.deadline()) > retry.Peek(); {
		select {
		case <-time.After(retry.Step()):
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		err = l.confirm(ctx, cfg, lock)
	}
	switch {
	case err == nil:
		return lock, nil
	case errors.Is(err, ErrNotHeld):
		return nil, errLapsed
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	l.release(rctx, []wire.Keys{k}, []string{g.Value}, cfg.mode, true) // passes the grant on
	cancel()
	if ctx.Err() != nil {
		return nil, join(ErrNotAcquired, ctx.Err())
	}
	return nil, err
}
