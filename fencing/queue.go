package fencing

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Waiting (see docs/waiting.md): what a waiter does with the queue in Redis. A waiter that
// finds the resource busy joins its queue, one element "<Locker id>.<n>.<lease ms><rules>" per
// waiter. The release script grants the lock to the head element with a new token and the
// element's lease and announces "<element>:<token>" on the channel of the resource and the
// element's Locker alone (keys.grants; to the releasing Locker itself, in its reply): the
// waiter returns without another round trip (a lease shorter than its TTL is extended later).
// A Locker's waiter key per resource ("w:<id>") marks its elements alive; its longest-waiting
// waiter there polls every pollEvery (poll.lua) to renew the key, put back dropped elements and
// find a grant whose announcement was lost or a lock whose lease ran out. line.go keeps the
// Locker's waiters and their grants.

const (
	// entryTTL is how long a waiter key outlives its last renewal, the same for every Locker:
	// any of them may renew the queue key for all (ENTRY_TTL in the scripts, see scripts.go).
	entryTTL = 3 * time.Second
	// pollEvery is how far apart, at most (less jitter), the front waiter of a Locker checks
	// with Redis when no announcement arrives; it renews the key well within entryTTL.
	pollEvery = time.Second
	// grantLease is the longest lease of a grant from the queue. A waiter process that dies
	// with a grant on its way holds the resource up for grantLease and a round trip (the next
	// waiter checks as the lease ends, see leaseSeen); one that dies before, for at most
	// entryTTL.
	grantLease = 3 * time.Second
	// renewAfter is how long after a write of a Locker's waiter key and the queue's TTL a
	// join need not write them again: a waiter that joins then polls, at most 1.2 pollEvery
	// later, before they run out.
	renewAfter = entryTTL - 3*pollEvery/2
	// outageWait is how long a queued waiter goes on checking with Redis while every check
	// fails with an error that can pass (see passing): long enough for a restart, a
	// Cluster's failover with the default cluster-node-timeout (15s) and the CLUSTERDOWN of a
	// primary that rejoins.
	outageWait = 30 * time.Second
)

// errLapsed is a waiter's error when the grant it got had lapsed: it queues again.
var errLapsed = errors.New("fencing: grant lapsed")

// ended is queue's error when the wait ended: context, WithMaxWait or Close. last is the error
// of the checks with Redis that failed since the last one that worked, nil if none did.
type ended struct {
	last  error
	ahead int // waiters ahead in the queue when it left, or -1 when unknown
}

func (e *ended) Error() string { return "fencing: wait ended" }

// subscribePatience is how long a waiter that starts listening waits for the subscription to
// be confirmed before it joins the queue (a grant announced before is not heard; the front
// waiter's checks catch it).
const subscribePatience = 50 * time.Millisecond

// wait is Acquire's loop.
func (l *Locker) wait(ctx context.Context, cfg *config, resource string) (*Lock, int, error) {
	k := resourceKeys(cfg.prefix, resource)
	ws, parent, attempts, begin := l.waits, ctx, 0, time.Now()
	if cfg.maxWait >= 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cfg.maxWait)
		defer cancel()
	}
	var busy time.Duration
	// The uncontended path: one script and no subscription, unless this Locker already waits
	// on the resource, subscribed.
	if cfg.maxWait == 0 || !ws.listening(k.channel) {
		attempts++
		locks, r, err := l.attempt(parent, cfg, []member{{name: resource, keys: k}}, "", "")
		if err != nil {
			return nil, attempts, opErr("acquire", resource, err)
		}
		if len(locks) > 0 {
			return locks[0], attempts, nil
		}
		if busy = r.busy.RetryAfter; cfg.maxWait == 0 {
			return nil, attempts, r.busy
		}
	}
	seen := time.Now()
	ln, err := ws.enter(ctx, k, cfg.mode, subscribePatience)
	if err != nil {
		return nil, attempts, err
	}
	defer ws.exit(ln)
	if busy > 0 {
		ln.leaseSeen(seen, busy)
	}
	lock, err := l.queue(ctx, parent, cfg, resource, ln, &attempts)
	for err == errLapsed {
		lock, err = l.queue(ctx, parent, cfg, resource, ln, &attempts)
	}
	var e *ended
	if errors.As(err, &e) {
		b := &BusyError{Resource: resource, RetryAfter: busy, Waited: time.Since(begin), Ahead: e.ahead}
		switch {
		case isDone(l.done):
			err = ErrClosed
		case parent.Err() != nil:
			err = join(join(b, parent.Err()), e.last)
		default:
			err = join(b, e.last) // WithMaxWait ran out
		}
	}
	return lock, attempts, err
}

// queue joins the queue as one waiter and waits for the lock, until a grant (the lock, or
// errLapsed), the end of the wait (*ended) or an error from Redis that cannot pass.
func (l *Locker) queue(ctx, parent context.Context, cfg *config, resource string, ln *line, attempts *int) (lock *Lock, err error) {
	lease := min(time.Duration(millis(cfg.ttl))*time.Millisecond, grantLease)
	w := &waiter{ln: ln, mode: cfg.mode, elem: element(l.waits.id, l.waits.seq.Add(1), lease, cfg), lease: lease, grant: make(chan grant, 1), wake: make(chan struct{}, 1)}
	defer func() {
		ahead := l.leave(w)
		if e, ok := err.(*ended); ok {
			e.ahead = ahead
		}
	}()
	if lock, err := l.join(parent, cfg, resource, w, attempts); err != nil || lock != nil {
		return lock, err
	}
	quiet := newBackoff(cfg.pollMin, cfg.pollMax) // polls while no announcement can come
	var failing error                             // see ended
	var failingSince time.Time
	for {
		d := min(cfg.pollMax, pollEvery)
		if failing != nil || !l.waits.listening(ln.k.channel) {
			d = min(quiet.step(), d)
		}
		select {
		case g := <-w.grant:
			if parent.Err() != nil {
				w.grant <- g // for leave, which passes it on
				return nil, &ended{last: failing, ahead: -1}
			}
			return l.take(parent, cfg, resource, ln.k, g)
		case <-w.wake:
		case <-time.After(ln.nextPoll(w, jitter(d))):
		case <-ctx.Done():
			return nil, &ended{last: failing, ahead: -1}
		case <-l.done:
			return nil, &ended{last: failing, ahead: -1}
		}
		if !ln.isFront(w) {
			continue
		}
		*attempts++
		err := l.poll(parent, ln)
		switch {
		case err == nil:
			if parent.Err() == nil { // else poll gave up on its call: keep the last error
				failing = nil
			}
		case !passing(err) || (failing != nil && time.Since(failingSince) >= l.waits.outage):
			return nil, err
		case failing == nil:
			// Keep the place in the queue: Redis keeps the elements of a Locker whose key
			// lapsed until a grant reaches them, and the next check that works puts back
			// those dropped.
			failing, failingSince = err, time.Now()
		default:
			failing = err
		}
	}
}

// join adds w to its line and its element to the Redis queue. When the resource is free and
// nobody waits, the acquire script takes it at once and join returns the lock.
func (l *Locker) join(ctx context.Context, cfg *config, resource string, w *waiter, attempts *int) (*Lock, error) {
	ln := w.ln
	ln.mu.Lock()
	others := slices.ContainsFunc(ln.waiters, queued)
	ln.waiters = append(ln.waiters, w)
	w.sent = time.Now()
	deaf := !ln.subscribed() // a grant announced before the subscription is confirmed is lost
	entry := ""
	if !w.sent.Before(ln.renewBy) {
		entry = ln.entry()
	}
	ln.mu.Unlock()
	pushed := false
	if others && entry == "" {
		// Other waiters of this Locker are queued, so the queue exists (their polls keep it
		// alive) and the newcomer cannot be first: append its element.
		n, err := l.client.RPushX(ctx, ln.k.queue, w.elem).Result()
		pushed = err == nil && n > 0
	}
	var r attemptReply
	sent := time.Now()
	if !pushed {
		*attempts++
		locks, reply, err := l.attempt(ctx, cfg, []member{{name: resource, keys: ln.k}}, w.elem, entry)
		if err != nil {
			if answer := (redis.Error)(nil); !errors.As(err, &answer) {
				// The script may have queued the element: leave takes it out again.
				ln.mu.Lock()
				w.joined = true
				ln.mu.Unlock()
			}
			return nil, opErr("acquire", resource, err)
		}
		if len(locks) > 0 {
			return locks[0], nil
		}
		r = reply
	}
	ln.mu.Lock()
	w.joined = true
	if entry != "" {
		ln.renewBy = sent.Add(renewAfter) // the script wrote the key
	}
	if deaf && ln.subscribed() {
		// Confirmed while this call was on its way: a grant to w may have been announced to
		// nobody, and the front waiter's poll, woken by the confirmation, did not name w.
		ln.wakeFront()
	}
	ln.mu.Unlock()
	l.waits.saw(ln.k, sent, r.held)
	return nil, nil
}

// poll runs the poll script for ln: it renews this Locker's waiter key, puts back its
// waiters' elements that were dropped, and finds a grant whose announcement was lost or a lock
// whose holder's lease ran out.
func (l *Locker) poll(ctx context.Context, ln *line) error {
	ws := l.waits
	ln.io.Lock()
	defer ln.io.Unlock()
	ln.mu.Lock()
	args := []any{ws.id, ln.entry(), l.topo.Publish()}
	for _, w := range ln.waiters {
		if queued(w) {
			args = append(args, w.elem)
		}
	}
	ln.renewBy = time.Now().Add(renewAfter)
	ln.due = time.Time{}
	ln.mu.Unlock()
	sent := time.Now()
	res, err := pollScript.runOn(ctx, l.client, ln.k, args...).Slice()
	switch {
	case err != nil && ctx.Err() != nil:
		return nil // the caller's context ended: the wait ends with that
	case err != nil:
		return err
	case len(res) > 0 && res[0] == int64(flagGranted):
		grants, err := grantPairs(res, 3)
		if err != nil {
			return err
		}
		for _, g := range grants {
			var after time.Time
			if g.now {
				after = sent // granted by this poll
			}
			ws.granted(ln.k, g.elem, g.token, after)
		}
	case len(res) > 1:
		held, _ := res[1].(string)
		ws.saw(ln.k, sent, held)
		if len(res) > 2 {
			pttl, _ := res[2].(int64)
			ln.leaseSeen(time.Now(), time.Duration(pttl)*time.Millisecond)
		}
	}
	return nil
}

// leave takes w off its line. A grant to w that it did not take is released, which passes it
// on; its element, if still queued, is removed. It waits for a poll in flight, which would
// put back as dropped the element of a grant w took and released meanwhile (a stale element).
// It returns how many waiters were ahead of w's element when it was removed, or -1 when that
// is unknown (not queued, or Redis did not say).
func (l *Locker) leave(w *waiter) int {
	ln := w.ln
	ln.io.Lock()
	defer ln.io.Unlock()
	ln.mu.Lock()
	ln.waiters = slices.DeleteFunc(ln.waiters, func(x *waiter) bool { return x == w })
	inQueue := queued(w) // no grant is delivered to w from now on
	ln.mu.Unlock()
	ahead := -1
	if len(w.grant) > 0 { // nothing is sent to w any more
		l.passOn(ln.k, (<-w.grant).value, w.mode)
	} else if inQueue {
		ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
		defer cancel()
		// One round trip: where the element stood (for the error), then its removal.
		var pos *redis.IntCmd
		var rem *redis.IntCmd
		_, _ = l.client.Pipelined(ctx, func(p redis.Pipeliner) error {
			pos = p.LPos(ctx, ln.k.queue, w.elem, redis.LPosArgs{})
			rem = p.LRem(ctx, ln.k.queue, 0, w.elem)
			return nil
		})
		if n, err := pos.Result(); err == nil {
			ahead = int(n)
		}
		if n, err := rem.Result(); err == nil && n == 0 {
			// The element was popped: granted to w (the announcement is on its way) or
			// dropped as dead. Free such a grant now.
			_, _ = l.releaseOne(ctx, ln.k, w.elem+":", w.mode, nil)
		}
	}
	return ahead
}

// take turns a grant into a Lock, or returns errLapsed. A grant's lease is the TTL, or
// grantLease when the TTL is longer: when the local clock shows at least half of it left,
// take returns at once, and a lease shorter than the TTL is extended to it off the hand-off
// path (see Lock.extendLater; Do's renewals take it over). Otherwise, and always with
// WithReplicas (whose WAIT must come first), it extends the lock to the TTL before it
// returns, through errors that can pass while the grant's lease lasts.
func (l *Locker) take(ctx context.Context, cfg *config, resource string, k keys, g grant) (*Lock, error) {
	lock := &Lock{locker: l, hooks: cfg.hooks, resource: resource, keys: k, mode: cfg.mode, value: g.value, token: g.token, acquired: time.Now()}
	lock.setValidUntil(g.start, g.lease)
	if cfg.replicas == 0 && time.Until(lock.deadline()) > g.lease/2 {
		if ttl := time.Duration(millis(cfg.ttl)) * time.Millisecond; ttl > g.lease {
			lock.extendLater(ttl)
		}
		return lock, nil
	}
	err := l.confirm(ctx, cfg, lock)
	// An error that can pass (see passing) is tried again while the grant's lease lasts.
	for retry := newBackoff(retryFirst, retryMost); passing(err) && time.Until(lock.deadline()) > retry.peek(); {
		select {
		case <-time.After(retry.step()):
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
	l.passOn(k, g.value, cfg.mode)
	if ctx.Err() != nil {
		return nil, join(ErrNotAcquired, ctx.Err())
	}
	return nil, err
}

// element returns a waiter's queue element (see lib.lua's parse): "<Locker id>.<n>.<lease
// ms>", followed by the rules of its acquisition: 'f' when its tokens are floored at the
// server clock, 'e<ms>' when the counter expires, 's' when it is shared or 'l<n>' for one of
// n slots.
func element(id string, n uint64, lease time.Duration, cfg *config) string {
	e := id + "." + strconv.FormatUint(n, 10) + "." + strconv.FormatInt(lease.Milliseconds(), 10)
	switch {
	case cfg.expiry > 0:
		e += "e" + strconv.FormatInt(millis(cfg.expiry), 10)
	case cfg.timeFloor:
		e += "f"
	}
	switch {
	case cfg.mode.shared:
		e += "s"
	case cfg.mode.limit > 1:
		e += "l" + strconv.Itoa(cfg.mode.limit)
	}
	return e
}

// elementMode returns the mode of the waiter of a queue element (see element).
func elementMode(elem string) mode {
	rules := elem[strings.LastIndexByte(elem, '.')+1:]
	if strings.HasSuffix(rules, "s") {
		return mode{shared: true}
	}
	if i := strings.LastIndexByte(rules, 'l'); i >= 0 {
		n, _ := strconv.Atoi(rules[i+1:])
		return mode{limit: n}
	}
	return mode{}
}

// jitter returns d ±20%.
func jitter(d time.Duration) time.Duration {
	return d - d/5 + time.Duration(rand.Int64N(int64(2*d/5)+1))
}
