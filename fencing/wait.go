package fencing

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Waiting (see docs/waiting.md). A waiter that finds the resource busy joins its queue in
// Redis, one element "<Locker id>.<n>" per waiter. The release script grants the lock to the
// head element with a new token and a short lease (grantLease) and announces
// "<element>:<token>" on the channel of the resource and the element's Locker alone,
// "<keys.channel>:<Locker id>" (to the releasing Locker itself, in its reply);
// the waiter returns without another round trip (a lease shorter than its TTL is extended later).
// A Locker's waiter key per resource ("w:<id>") marks its elements alive; its longest-waiting
// waiter there polls every pollEvery (poll.lua) to renew the key, put back dropped elements and
// find a grant whose announcement was lost or a lock whose lease ran out.

const (
	// entryTTL is how long a waiter key outlives its last renewal, the same for every Locker:
	// any of them may renew the queue key for all (ENTRY_TTL in grant.lua).
	entryTTL = 3 * time.Second
	// pollEvery is how far apart, at most (less jitter), the front waiter of a Locker checks
	// with Redis when no announcement arrives; it renews the key well within entryTTL.
	pollEvery = time.Second
	// grantLease is the lease of every grant from the queue. A waiter process that dies with a
	// grant on its way holds the resource up for grantLease and a round trip (the next
	// waiter checks as the lease ends, see leaseSeen); one that dies before, for at most
	// entryTTL.
	grantLease = 3 * time.Second
	// renewAfter is how long after a write of a Locker's waiter key and the queue's TTL a
	// join need not write them again: a waiter that joins then polls, at most 1.2 pollEvery
	// later, before they run out.
	renewAfter = entryTTL - 3*pollEvery/2
)

// waiting is a Locker's side of the queues: its lines of local waiters and the notifier that
// brings their grants.
type waiting struct {
	l       *Locker
	id      string        // random; the Locker's id in the queues
	idArg   any           // id boxed once, for the scripts' arguments
	publish byte          // how the scripts announce: 'P' (PUBLISH), 'S' (SPUBLISH), '-' (none: Ring polls)
	outage  time.Duration // outageWait; shorter in tests
	notes   *notifier     // nil when waiters poll
	seq     atomic.Uint64
	closed  atomic.Bool
	done    chan struct{} // closed by close

	mu     sync.Mutex         // guards the fields below and every line's and waiter's state
	lines  map[string]*line   // by channel
	byElem map[string]*waiter // by queue element
}

// line is a Locker's state for one resource it waits on.
type line struct {
	k       keys
	io      sync.Mutex    // orders polls and removals of elements
	ready   chan struct{} // closed once subscribed
	isReady bool
	users   int         // waiting calls that use the line
	linger  *time.Timer // drops the line once idle for entryTTL
	since   int64       // when the line was created, in Unix milliseconds
	floor   bool        // a waiter asked for tokens floored at the server clock
	renewBy time.Time   // the waiter key needs no write before then
	due     time.Time   // the holder's lease, as last seen, ends by then: the front waiter checks
	waiters []*waiter   // in arrival order
	last    int64       // the highest token handled (delivered or passed on)
	seen    time.Time   // the latest call whose reply showed seenOf, another's token, held:
	seenOf  int64       // any later token was granted after seen
}

type waiter struct {
	ln     *line
	elem   string        // its queue element (see element)
	lease  time.Duration // of a grant to it: its TTL, at most grantLease
	joined bool          // its element is in the Redis queue
	sent   time.Time     // when its element was first sent to Redis: any grant to it came later
	got    bool          // a grant was delivered to it
	grant  chan grant    // capacity 1
	wake   chan struct{} // capacity 1: check with Redis now
}

// grant is a lock granted to a waiter from the queue.
type grant struct {
	token int64
	value string
	lease time.Duration
	start time.Time // the lease began after this; zero when unknown
}

// ended is queue's error when the wait ended: context, WithMaxWait or Close. last is the error
// of the checks with Redis that failed since the last one that worked, nil if none did.
type ended struct {
	last  error
	ahead int // waiters ahead in the queue when it left, or -1 when unknown
}

func (e *ended) Error() string { return "fencing: wait ended" }

// outageWait is how long a queued waiter goes on checking with Redis while every check fails
// with an error that can pass (see passing): long enough for a restart, a Cluster's failover
// with the default cluster-node-timeout (15s) and the CLUSTERDOWN of a primary that rejoins.
const outageWait = 30 * time.Second

func newWaiting(l *Locker, usable bool) *waiting {
	id, _ := newOwner() // on a broken random source, "" still works within one Locker
	ws := &waiting{l: l, id: id, idArg: id, publish: '-', outage: outageWait, done: make(chan struct{}), lines: map[string]*line{}, byElem: map[string]*waiter{}}
	heard, ready := ws.heard, func(ch string) { ws.kick(strings.TrimSuffix(ch, ":"+ws.id), true) }
	switch c := l.client.(type) {
	case *redis.Ring:
	case *redis.ClusterClient:
		ws.publish, ws.notes = 'S', newNotifier(clusterRoute{c}, heard, ready)
	default:
		ws.publish, ws.notes = 'P', newNotifier(serverRoute{c}, heard, ready)
	}
	if !usable {
		ws.publish, ws.notes = '-', nil
	}
	return ws
}

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
		lock, r, err := l.attempt(parent, cfg, resource, k, "", "")
		if err != nil || lock != nil {
			return lock, attempts, err
		}
		if busy = r.pttl; cfg.maxWait == 0 {
			return nil, attempts, &busyError{resource: resource, retryAfter: busy}
		}
	}
	seen := time.Now()
	ln, err := ws.enter(ctx, k, cfg.retryMin)
	if err != nil {
		return nil, attempts, err
	}
	defer ws.exit(ln)
	if busy > 0 {
		ws.leaseSeen(ln, seen, busy)
	}
	var lock *Lock
	for lock == nil && err == nil { // neither: the grant had lapsed, queue again
		lock, err = l.queue(ctx, parent, cfg, resource, ln, &attempts)
	}
	var e *ended
	if errors.As(err, &e) {
		b := &busyError{resource: resource, retryAfter: busy, waited: time.Since(begin), ahead: e.ahead}
		switch {
		case ws.closed.Load():
			err = ErrClosed
		case parent.Err() != nil:
			err = join(join(b, parent.Err()), e.last)
		default:
			err = join(b, e.last) // WithMaxWait ran out
		}
	}
	return lock, attempts, err
}

// queue joins the queue as one waiter and waits for the lock; nil and no error when the grant
// it got had lapsed.
func (l *Locker) queue(ctx, parent context.Context, cfg *config, resource string, ln *line, attempts *int) (lock *Lock, err error) {
	ws := l.waits
	lease := min(time.Duration(millis(cfg.ttl))*time.Millisecond, grantLease)
	w := &waiter{ln: ln, elem: element(ws.id, ws.seq.Add(1), lease, cfg.timeFloor), lease: lease, grant: make(chan grant, 1), wake: make(chan struct{}, 1)}
	defer func() {
		ahead := l.leave(w)
		if e, ok := err.(*ended); ok {
			e.ahead = ahead
		}
	}()
	if lock, err := l.join(parent, cfg, resource, w, attempts); err != nil || lock != nil {
		return lock, err
	}
	backoff := cfg.retryMin
	var failing error // see ended
	var failingSince time.Time
	for {
		d := min(cfg.retryMax, pollEvery)
		if failing != nil || !ws.listening(ln.k.channel) {
			d = min(backoff, d) // no announcements, or Redis failing: poll with a back-off
			backoff = min(2*backoff, cfg.retryMax)
		}
		select {
		case g := <-w.grant:
			if parent.Err() != nil {
				w.grant <- g // for leave, which passes it on
				return nil, &ended{last: failing, ahead: -1}
			}
			return l.take(parent, cfg, resource, ln.k, g)
		case <-w.wake:
		case <-time.After(ws.nextPoll(w, jitter(d))):
		case <-ctx.Done():
			return nil, &ended{last: failing, ahead: -1}
		case <-ws.done:
			return nil, &ended{last: failing, ahead: -1}
		}
		if !ws.front(w) {
			continue
		}
		*attempts++
		err := l.poll(parent, ln)
		switch {
		case err == nil:
			if parent.Err() == nil { // else poll gave up on its call: keep the last error
				failing = nil
			}
		case !passing(err) || (failing != nil && time.Since(failingSince) >= ws.outage):
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
	ws, ln := l.waits, w.ln
	ws.mu.Lock()
	others := slices.ContainsFunc(ln.waiters, queued)
	ln.waiters = append(ln.waiters, w)
	ws.byElem[w.elem] = w
	w.sent = time.Now()
	deaf := !ln.isReady // a grant announced before the subscription is confirmed is lost
	entry := ""
	if !time.Now().Before(ln.renewBy) || (cfg.timeFloor && !ln.floor) {
		ln.floor = ln.floor || cfg.timeFloor
		entry = ln.entry()
	}
	ws.mu.Unlock()
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
		lock, reply, err := l.attempt(ctx, cfg, resource, ln.k, w.elem, entry)
		if err != nil || lock != nil {
			return lock, err
		}
		r = reply
	}
	ws.mu.Lock()
	w.joined = true
	if entry != "" {
		ln.renewBy = sent.Add(renewAfter) // the script wrote the key
	}
	if deaf && ln.isReady {
		// Confirmed while this call was on its way: a grant to w may have been announced to
		// nobody, and the front waiter's poll, woken by the confirmation, did not name w.
		ln.wakeFront()
	}
	ws.mu.Unlock()
	ws.saw(ln.k, sent, r.held)
	return nil, nil
}

// poll runs the poll script for ln: it renews this Locker's waiter key, puts back its
// waiters' elements that were dropped, and finds a grant whose announcement was lost or a lock
// whose holder's lease ran out.
func (l *Locker) poll(ctx context.Context, ln *line) error {
	ws := l.waits
	ln.io.Lock()
	defer ln.io.Unlock()
	ws.mu.Lock()
	args := []any{ws.idArg, ln.entry(), l.opts}
	for _, w := range ln.waiters {
		if queued(w) {
			args = append(args, w.elem)
		}
	}
	ln.renewBy = time.Now().Add(renewAfter)
	ln.due = time.Time{}
	ws.mu.Unlock()
	sent := time.Now()
	res, err := pollScript.Run(ctx, l.client, ln.k.script(), args...).Slice()
	switch {
	case err != nil && ctx.Err() != nil:
		return nil // the caller's context ended: the wait ends with that
	case err != nil:
		return err
	case len(res) > 3 && res[0] == int64(2): // a grant
		elem, _ := res[1].(string)
		token, err := parseToken(res[2])
		if err != nil {
			return err
		}
		var start time.Time
		if res[3] == int64(1) {
			start = sent // granted by this poll
		}
		ws.deliver(ln.k, elem, token, start, false)
	case len(res) > 1:
		held, _ := res[1].(string)
		ws.saw(ln.k, sent, held)
		if len(res) > 2 {
			pttl, _ := res[2].(int64)
			ws.leaseSeen(ln, time.Now(), time.Duration(pttl)*time.Millisecond)
		}
	}
	return nil
}

// leaseSeen records that the lock of ln had left of its lease when a reply came back at
// replied: the front waiter checks with Redis as soon as it ends (a holder that died sends no
// announcement), unless its next poll comes first.
func (ws *waiting) leaseSeen(ln *line, replied time.Time, left time.Duration) {
	if left <= 0 {
		return
	}
	ws.mu.Lock()
	ln.due = replied.Add(left + time.Millisecond) // PTTL is rounded to the millisecond
	ws.mu.Unlock()
}

// nextPoll returns how long w waits before its next check with Redis: d, or less when w is
// its line's front waiter and the holder's lease ends sooner.
func (ws *waiting) nextPoll(w *waiter, d time.Duration) time.Duration {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if due := w.ln.due; !due.IsZero() && w.ln.front() == w {
		return min(d, max(time.Until(due), 0))
	}
	return d
}

// leave takes w off its line. A grant to w that it did not take is released, which passes it
// on; its element, if still queued, is removed. It waits for a poll in flight, which would
// put back as dropped the element of a grant w took and released meanwhile (a stale element).
// It returns how many waiters were ahead of w's element when it was removed, or -1 when that
// is unknown (not queued, or Redis did not say).
func (l *Locker) leave(w *waiter) int {
	ws, ln := l.waits, w.ln
	ln.io.Lock()
	defer ln.io.Unlock()
	ws.mu.Lock()
	ln.waiters = slices.DeleteFunc(ln.waiters, func(x *waiter) bool { return x == w })
	delete(ws.byElem, w.elem) // no grant is delivered to w from now on
	inQueue := queued(w)
	ws.mu.Unlock()
	ahead := -1
	if len(w.grant) > 0 { // nothing is sent to w any more
		l.passOn(ln.k, (<-w.grant).value)
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
			_, _ = l.release(ctx, ln.k, w.elem+":")
		}
	}
	return ahead
}

// take turns a grant into a Lock, or returns nil and no error when the grant has lapsed. A
// grant's lease is the TTL, or grantLease when the TTL is longer: when the local clock shows
// at least half of it left, take returns at once, and a lease shorter than the TTL is extended
// to it off the hand-off path (by Do's renewals, or for Acquire by the Lock's own timer, see
// Lock.extendLater). Otherwise, and always with WithReplicas (whose WAIT must come first), it
// extends the lock to the TTL before it returns, through errors that can pass while the
// grant's lease lasts.
func (l *Locker) take(ctx context.Context, cfg *config, resource string, k keys, g grant) (*Lock, error) {
	lock := &Lock{locker: l, hooks: cfg.hooks, resource: resource, keys: k, value: g.value, token: g.token, acquired: time.Now(), keyArgs: k.args(), valueArg: g.value}
	if !g.start.IsZero() {
		lock.setValidUntil(g.start, g.lease)
	}
	if cfg.replicas == 0 && time.Until(lock.deadline()) > g.lease/2 {
		if ttl := time.Duration(millis(cfg.ttl)) * time.Millisecond; ttl > g.lease && !cfg.renewed {
			lock.extendLater(cfg, ttl)
		}
		return lock, nil
	}
	err := l.confirm(ctx, cfg, lock)
	// An error that can pass (see passing) is tried again while the grant's lease lasts.
	for backoff := cfg.retryMin; passing(err) && time.Until(lock.deadline()) > backoff; backoff = min(2*backoff, cfg.retryMax) {
		select {
		case <-time.After(backoff):
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
		return nil, nil // lapsed
	}
	l.passOn(k, g.value)
	if ctx.Err() != nil {
		return nil, join(ErrNotAcquired, ctx.Err())
	}
	return nil, err
}

// passOn releases a lock granted to this Locker that no waiter takes, which grants it to the
// next waiter. Errors are ignored: the lease then runs out by itself.
func (l *Locker) passOn(k keys, value string) {
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	_, _ = l.release(ctx, k, value)
}

// deliver hands the lock granted to elem, if one of this Locker's, with token to its waiter. A
// grant that no waiter takes is passed on when it was announced (told); one that a reply
// revealed is left to the leaving waiter, which frees it.
func (ws *waiting) deliver(k keys, elem string, token int64, start time.Time, told bool) {
	if !ws.mine(elem) {
		return
	}
	value := elem + ":" + strconv.FormatInt(token, 10)
	ws.mu.Lock()
	ln := ws.lines[k.channel]
	if ln != nil && token <= ln.last {
		ws.mu.Unlock()
		return // handled already
	}
	w := ws.byElem[elem]
	ok := w != nil && w.ln == ln && !w.got
	if ln != nil && (ok || told) {
		ln.last = token
	}
	if ok {
		w.got = true
		if start.IsZero() { // granted after w's element was sent, and after any call that saw an older token
			start = w.sent
			if ln.seenOf < token && ln.seen.After(start) {
				start = ln.seen
			}
		}
		w.grant <- grant{token: token, value: value, lease: w.lease, start: start}
	}
	ws.mu.Unlock()
	if !ok && told {
		ws.l.passOn(k, value)
	}
}

// heard handles an announcement on this Locker's channel ch: "<element>:<token>".
func (ws *waiting) heard(ch, payload string) {
	if elem, token, ok := splitValue(payload); ok {
		ws.deliver(channelKeys(strings.TrimSuffix(ch, ":"+ws.id)), elem, token, time.Time{}, true)
	}
}

// saw records that a reply to a call sent at sent showed held as the lock value of k: a grant
// to one of this Locker's waiters is delivered, and the token, whoever's (a release's own
// too), dates the grants after it.
func (ws *waiting) saw(k keys, sent time.Time, held string) {
	owner, token, ok := splitValue(held)
	if !ok {
		return
	}
	ws.deliver(k, owner, token, time.Time{}, false) // if it is mine; dated by older calls
	ws.mu.Lock()
	if ln := ws.lines[k.channel]; ln != nil && sent.After(ln.seen) {
		ln.seen, ln.seenOf = sent, token
	}
	ws.mu.Unlock()
}

// released records what a release sent at sent learnt: the lock value it found held, and a
// grant to one of this Locker's waiters, which the script returns instead of announcing (elem
// is "" when there is none).
func (ws *waiting) released(k keys, sent time.Time, value, elem string, token int64) {
	ws.saw(k, sent, value)
	if elem != "" {
		ws.deliver(k, elem, token, sent, true)
	}
}

// element returns a waiter's queue element: "<Locker id>.<n>.<lease ms>", followed by 'f'
// when it wants tokens floored at the server clock (see grant.lua).
func element(id string, n uint64, lease time.Duration, floor bool) string {
	e := id + "." + strconv.FormatUint(n, 10) + "." + strconv.FormatInt(lease.Milliseconds(), 10)
	if floor {
		e += "f"
	}
	return e
}

// mine reports whether elem is one of this Locker's elements.
func (ws *waiting) mine(elem string) bool {
	return strings.HasPrefix(elem, ws.id+".")
}

// entry returns the content of this Locker's waiter key for ln (see grant.lua).
func (ln *line) entry() string {
	floor := "0:"
	if ln.floor {
		floor = "1:"
	}
	return strconv.FormatInt(grantLease.Milliseconds(), 10) + ":" + floor + strconv.FormatInt(ln.since, 10)
}

// queued reports whether w's element is in the Redis queue.
func queued(w *waiter) bool { return w.joined && !w.got }

// enter returns the line for k, creating it and subscribing to its channel when it is new,
// and waits up to patience for the subscription to be confirmed.
func (ws *waiting) enter(ctx context.Context, k keys, patience time.Duration) (*line, error) {
	ws.mu.Lock()
	if ws.closed.Load() {
		ws.mu.Unlock()
		return nil, ErrClosed
	}
	ln := ws.lines[k.channel]
	if ln == nil {
		ln = &line{k: k, ready: make(chan struct{}), since: time.Now().UnixMilli()}
		ws.lines[k.channel] = ln
		if ws.notes != nil {
			ws.notes.listen(k.channel+":"+ws.id, true)
		}
	}
	ln.users++
	if ln.linger != nil {
		ln.linger.Stop()
		ln.linger = nil
	}
	ws.mu.Unlock()
	if ws.notes != nil {
		select {
		case <-ln.ready:
		case <-time.After(patience):
		case <-ctx.Done():
		case <-ws.done:
		}
	}
	return ln, nil
}

// exit ends a call's use of ln; the last one out lets it linger for entryTTL, so a Locker
// that waits on the resource again soon keeps its subscription and fresh waiter key.
func (ws *waiting) exit(ln *line) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ln.users--; ln.users > 0 || ws.closed.Load() {
		return
	}
	ln.linger = time.AfterFunc(entryTTL, func() {
		ws.mu.Lock()
		defer ws.mu.Unlock()
		if ln.users == 0 && ws.lines[ln.k.channel] == ln && !ws.closed.Load() {
			delete(ws.lines, ln.k.channel)
			if ws.notes != nil {
				ws.notes.listen(ln.k.channel+":"+ws.id, false)
			}
		}
	})
}

// kick makes ch's front waiter check with Redis now. With confirmed, the server has
// just confirmed the subscription, perhaps on a new connection that lost an announcement.
func (ws *waiting) kick(ch string, confirmed bool) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	ln := ws.lines[ch]
	if ln == nil {
		return
	}
	if confirmed && !ln.isReady {
		ln.isReady = true
		close(ln.ready)
	}
	ln.wakeFront()
}

// wakeFront makes ln's front waiter poll: at once, or as soon as the call that queues it
// returns. The caller holds ws.mu.
func (ln *line) wakeFront() {
	if w := ln.front(); w != nil {
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
}

// listening reports whether this Locker waits on ch with a confirmed subscription.
func (ws *waiting) listening(ch string) bool {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	ln := ws.lines[ch]
	return ln != nil && ln.isReady
}

// front reports whether w is the longest-waiting waiter of its line without a grant: the one
// that polls.
func (ws *waiting) front(w *waiter) bool {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	return w.ln.front() == w
}

// front returns ln's longest-waiting waiter without a grant, or nil. The caller holds ws.mu.
func (ln *line) front() *waiter {
	i := slices.IndexFunc(ln.waiters, func(w *waiter) bool { return !w.got })
	if i < 0 {
		return nil
	}
	return ln.waiters[i]
}

// queuedOn reports whether this Locker has elements queued on ch, so that a release of the
// resource names it: a grant to one of them comes back in the release's reply.
func (ws *waiting) queuedOn(ch string) bool {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	ln := ws.lines[ch]
	return ln != nil && slices.ContainsFunc(ln.waiters, queued)
}

// close ends the subscriptions, wakes every waiter with ErrClosed and waits for the
// notifier's goroutines.
func (ws *waiting) close() {
	ws.mu.Lock()
	if ws.closed.Swap(true) {
		ws.mu.Unlock()
		return
	}
	close(ws.done)
	for _, ln := range ws.lines {
		if ln.linger != nil {
			ln.linger.Stop()
		}
	}
	ws.mu.Unlock()
	if ws.notes != nil {
		ws.notes.close()
	}
}

// splitValue splits a lock value "<owner>:<token>", with or without the mark '+' of a lock
// with waiters queued (see grant.lua).
func splitValue(v string) (owner string, token int64, ok bool) {
	v = strings.TrimSuffix(v, "+")
	i := strings.LastIndexByte(v, ':')
	if i < 0 {
		return "", 0, false
	}
	token, err := strconv.ParseInt(v[i+1:], 10, 64)
	return v[:i], token, err == nil && token > 0
}

// jitter returns d ±20%.
func jitter(d time.Duration) time.Duration {
	return d - d/5 + time.Duration(rand.Int64N(int64(2*d/5)+1))
}
