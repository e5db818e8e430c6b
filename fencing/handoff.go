package fencing

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Hand-off: when a Lock is released while a waiter of the same Locker is at the front of the
// resource's queue, the release script gives the lock straight to that waiter, with a new
// token, instead of deleting it. The waiter then needs no round trip of its own: a hand-off
// costs one round trip instead of two (the release, then the waiter's acquire).
//
// The script hands off only while the releasing Locker is the only subscriber to the
// resource's release channel (PUBSUB NUMSUB). When waiters of other Lockers (processes)
// listen, it releases and publishes as usual, so they are not passed over; see hub.released
// for how the releasing Locker then stands back.

// offer returns the front waiter of ch's queue if the lock may be handed to it: this
// Locker's subscription to ch is confirmed and counted by PUBSUB NUMSUB (not on a Cluster,
// where NUMSUB counts one node's subscribers), and the waiter's acquisition needs nothing the
// hand-off does not do (replica acknowledgements, the server-time floor).
func (h *hub) offer(ch string) *waiter {
	if !h.handOff.Load() || h.nq.Load() == 0 {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	q := h.queues[ch]
	if h.closed.Load() || q == nil || !q.isReady || len(q.waiters) == 0 {
		return nil
	}
	w := q.waiters[0]
	if w.cfg.replicas > 0 || w.cfg.timeFloor {
		return nil
	}
	return w
}

// deliver hands lock to w if w is still waiting at the front of ch's queue, and reports
// whether it did. A waiter that leaves afterwards releases an undelivered lock itself (see
// hub.leave).
func (h *hub) deliver(ch string, w *waiter, lock *Lock) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	q := h.queues[ch]
	if q == nil || len(q.waiters) == 0 || q.waiters[0] != w {
		return false
	}
	select {
	case w.grant <- lock:
		return true
	default: // cannot happen: the lock is exclusive, so one grant at a time
		return false
	}
}

// handOff runs the hand-off script for k and w. It reports whether the lock went to w, and
// the release script's result: 0 when k no longer held the lock, otherwise 1 plus the number
// of subscribers the release message reached (none when the lock went to w). When Redis answers the script with an
// error, it releases with the plain release script instead; when the error says the server
// will never run it (an ACL that denies PUBSUB), it also turns hand-offs off for the Locker.
func (k *Lock) handOff(ctx context.Context, w *waiter) (bool, int64, error) {
	l := k.locker
	owner, err := newOwner()
	if err != nil {
		return false, 0, err
	}
	ms := millis(w.cfg.ttl)
	sent := time.Now()
	res, err := handoffScript.Run(ctx, l.client, []string{k.keys.lock, k.keys.fence},
		k.owner, k.keys.channel, l.hub.id, owner, ms).Result()
	var refused redis.Error
	if errors.As(err, &refused) {
		// Redis answered with an error: the script stopped before the SET that hands the
		// lock over (its last call on that path), or did not run (BUSY, LOADING, READONLY).
		// Release with the plain script instead, and stop trying hand-offs if this server
		// will never allow them.
		if neverAllowed(refused.Error()) {
			l.hub.handOff.Store(false)
		}
		n, err := l.release(ctx, k.keys, k.owner)
		return false, n, err
	}
	if err != nil {
		// The script may have run and given the lock to the waiter's owner value, which
		// nobody will learn: free it rather than strand it until its TTL.
		l.releaseOwner(ctx, k.keys, owner)
		return false, 0, err
	}
	granted, token, n, err := parseHandOff(res)
	if err != nil {
		l.releaseOwner(ctx, k.keys, owner)
		return false, 0, err
	}
	if !granted {
		return false, n, nil
	}
	next := &Lock{
		locker:   l,
		hooks:    w.cfg.hooks,
		resource: k.resource,
		keys:     k.keys,
		owner:    owner + ":",
		token:    token,
		acquired: sent,
	}
	next.setValidUntil(sent, time.Duration(ms)*time.Millisecond)
	// As in attempt: a reply that came back after the lease could have run out is not
	// trusted. Either way the releasing Lock's part is done: report a release that reached
	// no other Locker, which wakes the front waiter to try for itself.
	if !next.valid() || !l.hub.deliver(k.keys.channel, w, next) {
		l.releaseOwner(ctx, k.keys, owner)
		return false, 1, nil
	}
	return true, 1, nil
}

// neverAllowed reports whether a script error says the server will not run the hand-off
// script for this client: an ACL denies a command (Redis 7.0 and 7.2 word it differently),
// or the server does not know one.
func neverAllowed(msg string) bool {
	return strings.HasPrefix(msg, "NOPERM") ||
		strings.Contains(msg, "can't run this command") ||
		strings.Contains(msg, "no permissions") ||
		strings.Contains(msg, "unknown command") ||
		strings.Contains(msg, "unknown subcommand")
}

// parseHandOff decodes the hand-off script's reply.
func parseHandOff(res any) (granted bool, token, n int64, err error) {
	if v, ok := res.(int64); ok && v == 0 {
		return false, 0, 0, nil
	}
	arr, _ := res.([]any)
	if len(arr) != 2 {
		return false, 0, 0, fmt.Errorf("unexpected reply %v", res)
	}
	switch flag, _ := arr[0].(int64); flag {
	case 1:
		n, _ = arr[1].(int64)
		return false, 0, 1 + n, nil
	case 2:
		token, err = parseToken(arr[1])
		return err == nil, token, 0, err
	}
	return false, 0, 0, fmt.Errorf("unexpected reply %v", res)
}
