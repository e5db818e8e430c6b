package fencing

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"time"
)

// Waiting. A waiter that finds the resource busy joins the resource's queue in Redis: a list
// of Locker ids next to the lock, one element per queued waiter (see grant.lua). The release
// script hands the lock to the Locker at the head in the same step, with a new token and the
// lease that Locker asked for, and announces "<id>:<token>" on the resource's channel; the
// Locker gives it to its longest-waiting waiter, which returns without another round trip.
// A grant to the releasing Locker itself comes back in the release's reply.
//
// Each Locker keeps a waiter key per resource ("w:<id>", see grant.lua) alive while it has
// waiters there; an element whose key has lapsed (its process died) is skipped. The
// longest-waiting local waiter polls Redis every pollEvery, which renews that key, puts
// back elements dropped while it had lapsed, and finds a grant whose announcement was lost
// or a lock whose holder's lease ran out.

const (
	// entryTTL is how long a Locker's queue entries outlive its last renewal. Every Locker
	// uses the same figure: any of them may renew the queue key for all.
	entryTTL   = 3 * time.Second
	entryTTLms = "3000" // entryTTL in milliseconds, as the scripts take it
	// pollEvery is how often the front waiter of a Locker checks with Redis at most apart
	// (less jitter) when no announcement arrives; it renews the entries well within entryTTL.
	pollEvery = time.Second
	// grantLease caps the lease of a lock granted to a waiter inside Do, whose renewals
	// extend it to the TTL: a waiter process that dies holds the resource up for at most
	// entryTTL, then grantLease, then one poll of the next waiter.
	grantLease = 3 * time.Second
)

// line is a Locker's state for one resource it waits on. Its fields are guarded by hub.mu,
// except io.
type line struct {
	k       keys
	io      sync.Mutex    // orders this Locker's queue commands for the resource
	ready   chan struct{} // closed when the subscription is confirmed, or at once on a Ring
	isReady bool
	users   int         // waiting calls that use the line
	linger  *time.Timer // drops the line once idle for entryTTL
	since   int64       // when the line was created, in Unix milliseconds
	waiters []*waiter   // in arrival order
	queued  int         // this Locker's elements in the Redis queue, by its own count
	joining int         // joins in flight
	owed    int         // grants due to waiters that left: passed on when they arrive
	last    int64       // the highest token granted to this Locker for the resource
	parked  *grant      // a grant that arrived while the waiter it is for was joining
	seen    [4]sighting // the latest replies that showed the lock held, newest first
	entry   entry       // what this Locker's waiter key holds
}

// sighting is a reply that showed the lock held with token, to a call sent at sent: any
// later token was granted after sent.
type sighting struct {
	sent  time.Time
	token int64
}

// entry is the content of a Locker's waiter key.
type entry struct {
	lease int64 // milliseconds
	floor bool
	until time.Time // renew by then
}

func (ln *line) value(e entry) string {
	floor := "0"
	if e.floor {
		floor = "1"
	}
	return strconv.FormatInt(e.lease, 10) + ":" + floor + ":" + strconv.FormatInt(ln.since, 10)
}

// grant is a lock granted to this Locker from the queue.
type grant struct {
	token int64
	value string
	lease time.Duration
	start time.Time // the lease began after this; zero when unknown
}

type waiter struct {
	cfg    *config
	joined bool          // its element is in the Redis queue
	chosen bool          // a grant was sent to it
	grant  chan grant    // capacity 1
	wake   chan struct{} // capacity 1: check with Redis now
}

// errRequeue is take's error when a grant turned out to have lapsed: the waiter queues again.
var errRequeue = errors.New("fencing: grant lapsed")

// wait is Acquire's loop.
func (l *Locker) wait(ctx context.Context, cfg *config, resource string) (*Lock, int, error) {
	k := resourceKeys(cfg.prefix, resource)
	h := l.hub
	attempts := 0
	parent := ctx
	if cfg.maxWait >= 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cfg.maxWait)
		defer cancel()
	}
	var busy time.Duration
	// The uncontended path: one script and no subscription, unless this Locker already waits
	// on the resource and is subscribed.
	if cfg.maxWait == 0 || !h.listening(k.channel) {
		attempts++
		lock, r, err := l.attempt(parent, cfg, resource, k, false, "", "")
		if err != nil || lock != nil {
			return lock, attempts, err
		}
		busy = r.pttl
		if cfg.maxWait == 0 {
			return nil, attempts, &busyError{resource: resource, retryAfter: busy}
		}
	}
	ln, err := h.enter(ctx, k, cfg.retryMin)
	if err != nil {
		return nil, attempts, err
	}
	defer h.exit(ln)
	ended := func() error {
		b := &busyError{resource: resource, retryAfter: busy}
		switch {
		case h.isClosed():
			return ErrClosed
		case parent.Err() != nil:
			return join(b, parent.Err())
		}
		return b // WithMaxWait ran out
	}
	for {
		lock, err := l.queue(ctx, parent, cfg, resource, ln, &attempts, ended)
		if !errors.Is(err, errRequeue) {
			return lock, attempts, err
		}
	}
}

// queue joins the queue as one waiter and waits for the lock.
func (l *Locker) queue(ctx, parent context.Context, cfg *config, resource string, ln *line, attempts *int, ended func() error) (lock *Lock, err error) {
	h := l.hub
	w := &waiter{cfg: cfg, grant: make(chan grant, 1), wake: make(chan struct{}, 1)}
	defer func() { l.leave(ln, w, lock != nil) }()
	if lock, err = l.join(parent, cfg, resource, ln, w, attempts); err != nil || lock != nil {
		return lock, err
	}
	backoff := cfg.retryMin
	for {
		d := min(cfg.retryMax, pollEvery)
		if !h.isReady(ln) {
			d = min(backoff, d) // no announcements: poll with a back-off
			backoff = min(2*backoff, cfg.retryMax)
		}
		t := time.NewTimer(jitter(d))
		select {
		case g := <-w.grant:
			t.Stop()
			if parent.Err() != nil {
				w.grant <- g // for leave, which passes it on
				return nil, ended()
			}
			return l.take(parent, cfg, resource, ln.k, g)
		case <-w.wake:
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, ended()
		case <-h.done:
			t.Stop()
			return nil, ended()
		}
		t.Stop()
		if h.front(ln, w) {
			*attempts++
			if err := l.poll(parent, ln); err != nil {
				return nil, err
			}
		}
	}
}

// join adds w to the line and its element to the Redis queue. When the resource is free and
// nobody waits, the acquire script takes it at once and join returns the lock.
func (l *Locker) join(ctx context.Context, cfg *config, resource string, ln *line, w *waiter, attempts *int) (*Lock, error) {
	h := l.hub
	ln.io.Lock()
	defer ln.io.Unlock()
	h.mu.Lock()
	ln.waiters = append(ln.waiters, w)
	ln.joining++
	queued := ln.queued
	e, entry := h.entryFor(ln, cfg)
	h.mu.Unlock()

	joined := false
	var lock *Lock
	var err error
	if queued > 0 && entry == "" {
		// This Locker has waiters queued, so the newcomer cannot be first: append its element
		// to the queue, which exists (the front waiter's polls keep it alive) and has a TTL.
		n, perr := l.client.RPushX(ctx, ln.k.queue, h.id).Result()
		joined = perr == nil && n > 0
	}
	var revealed int64
	if !joined {
		*attempts++
		var r attemptReply
		sent := time.Now()
		lock, r, err = l.attempt(ctx, cfg, resource, ln.k, true, h.id, entry)
		if err == nil && lock == nil {
			joined = true
			h.mu.Lock()
			if entry != "" {
				ln.entry = e // the script wrote it
			}
			revealed = h.sawLocked(ln, sent, r.held)
			h.mu.Unlock()
		}
	}
	if revealed > 0 {
		l.granted(ln.k, revealed, time.Time{}) // parked until this waiter counts as joined
	}
	h.mu.Lock()
	ln.joining--
	if joined {
		w.joined = true
		ln.queued++
	}
	var pass *grant
	if g := ln.parked; g != nil {
		if h.deliverLocked(ln, *g) {
			ln.parked = nil
		} else if ln.joining == 0 {
			pass, ln.parked = g, nil
		}
	}
	h.mu.Unlock()
	if pass != nil {
		l.passOn(ln.k, pass.value)
	}
	return lock, err
}

// poll runs the poll script for the line: it renews this Locker's entries and finds a grant
// whose announcement was lost or a lock whose holder's lease ran out.
func (l *Locker) poll(ctx context.Context, ln *line) error {
	h := l.hub
	ln.io.Lock()
	defer ln.io.Unlock()
	h.mu.Lock()
	queued, last := max(ln.queued, 0), ln.last
	ln.entry.until = time.Now().Add(entryTTL - pollEvery)
	entry := ln.value(ln.entry)
	h.mu.Unlock()
	sent := time.Now()
	res, err := pollScript.Run(ctx, l.client, ln.k.script(), h.idArg, queued, last, entryTTLms,
		entry, ln.k.channel, h.publishArg, l.cfg.expiryArg()).Slice()
	if err != nil {
		if ctx.Err() != nil {
			return nil // the caller's context ended: the wait ends with that
		}
		return err
	}
	flag, _ := res[0].(int64)
	if flag == 2 && len(res) > 1 {
		token, err := parseToken(res[1])
		if err != nil {
			return err
		}
		l.granted(ln.k, token, time.Time{})
		return nil
	}
	var held string
	if len(res) > 1 {
		held, _ = res[1].(string)
	}
	h.mu.Lock()
	revealed := h.sawLocked(ln, sent, held)
	h.mu.Unlock()
	if revealed > 0 {
		l.granted(ln.k, revealed, time.Time{})
	}
	return nil
}

// leave takes w off the line. An element of w's still queued is removed; a grant sent to w
// that it did not take (its context ended meanwhile) is passed on to the next waiter.
func (l *Locker) leave(ln *line, w *waiter, took bool) {
	h := l.hub
	if !h.unlink(ln, w, took, false) {
		return // nothing queued: no need to wait for the line's other queue commands
	}
	// Remove w's element, ordered with this Locker's other queue commands for the resource.
	ln.io.Lock()
	defer ln.io.Unlock()
	if !h.unlink(ln, w, took, true) {
		return // a grant chose w meanwhile and used its element
	}
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	n, err := l.client.LRem(ctx, ln.k.queue, 1, h.id).Result()
	cancel()
	h.mu.Lock()
	defer h.mu.Unlock()
	if err == nil && n == 0 {
		ln.owed++ // a grant took the element and is on its way: it is this waiter's
	} else {
		ln.queued--
	}
}

// unlink takes w off ln, unless its element is still queued in Redis and force is false. It
// reports whether that element is queued (w was left on ln if not forced). A grant sent to w
// that it did not take is passed on.
func (h *hub) unlink(ln *line, w *waiter, took, force bool) (queued bool) {
	h.mu.Lock()
	queued = w.joined && !w.chosen
	if queued && !force {
		h.mu.Unlock()
		return true
	}
	if i := slices.Index(ln.waiters, w); i >= 0 {
		ln.waiters = slices.Delete(ln.waiters, i, i+1)
	}
	var handed *grant
	select {
	case g := <-w.grant:
		handed = &g
	default:
	}
	h.mu.Unlock()
	if handed != nil && !took {
		h.locker.passOn(ln.k, handed.value)
	}
	return queued
}

// granted handles a grant of the resource to this Locker: from an announcement, a poll, or
// the reply to one of its own releases (then start is when that release was sent). The grant
// goes to the longest-waiting local waiter that has an element queued; with none, it is
// passed on.
func (l *Locker) granted(k keys, token int64, start time.Time) {
	value := l.hub.id + ":" + strconv.FormatInt(token, 10)
	if pass := l.hub.grantedLocked(k.channel, token, value, start); pass {
		l.passOn(k, value)
	}
}

// grantedLocked records a grant and delivers it; it reports whether it must be passed on.
func (h *hub) grantedLocked(ch string, token int64, value string, start time.Time) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	ln := h.lines[ch]
	if ln == nil {
		return true
	}
	if token <= ln.last {
		return false // already handled
	}
	ln.last = token
	ln.queued-- // below zero while the join whose element this was is in flight
	if start.IsZero() {
		start = ln.startOf(token)
	}
	g := grant{token: token, value: value, lease: time.Duration(ln.entry.lease) * time.Millisecond, start: start}
	switch {
	case ln.owed > 0:
		ln.owed--
		return true
	case h.deliverLocked(ln, g):
		return false
	case ln.joining > 0:
		ln.parked = &g
		return false
	}
	return true
}

// deliverLocked sends g to the longest-waiting waiter whose element is queued.
func (h *hub) deliverLocked(ln *line, g grant) bool {
	for _, w := range ln.waiters {
		if w.joined && !w.chosen {
			w.chosen = true
			w.grant <- g
			return true
		}
	}
	return false
}

// sawLocked records a reply to a call sent at sent that showed the lock value held. It
// returns the token when the value is a grant to this Locker not yet received, and 0
// otherwise.
func (h *hub) sawLocked(ln *line, sent time.Time, held string) int64 {
	owner, token, ok := splitValue(held)
	if !ok {
		return 0
	}
	copy(ln.seen[1:], ln.seen[:len(ln.seen)-1])
	ln.seen[0] = sighting{sent: sent, token: token}
	if owner == h.id && token > ln.last {
		return token
	}
	return 0
}

// startOf returns a time before the grant of token: the latest call that saw an older token
// held. Zero when no such call is known.
func (ln *line) startOf(token int64) time.Time {
	for _, s := range ln.seen {
		if !s.sent.IsZero() && s.token < token {
			return s.sent
		}
	}
	return time.Time{}
}

// entryFor returns the waiter key's content for a waiter with cfg joining ln, and its value
// to write, or "" when the key holds it already and is fresh.
func (h *hub) entryFor(ln *line, cfg *config) (entry, string) {
	e := entry{lease: millis(cfg.ttl), floor: cfg.timeFloor}
	if cfg.renewed {
		e.lease = min(e.lease, grantLease.Milliseconds())
	}
	now := time.Now()
	fresh := now.Before(ln.entry.until)
	if fresh && e.lease == ln.entry.lease && (e.floor == ln.entry.floor || !e.floor) {
		return ln.entry, ""
	}
	e.floor = e.floor || (fresh && ln.entry.floor)
	e.until = now.Add(entryTTL - pollEvery)
	return e, ln.value(e)
}

// passOn releases a lock granted to this Locker that no waiter takes, which grants it to the
// next waiter. Errors are ignored: the lease then runs out by itself.
func (l *Locker) passOn(k keys, value string) {
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	_, _ = l.release(ctx, k, value)
}

// take turns a grant into a Lock. The lease is confirmed with an extension (and WAIT for
// WithReplicas) when the grant used another lease than the waiter asked for (inside Do, a
// shorter one is fine: Do's renewals extend it), or when the local clock cannot show that at
// least half of it is left.
func (l *Locker) take(ctx context.Context, cfg *config, resource string, k keys, g grant) (*Lock, error) {
	lock := &Lock{locker: l, hooks: cfg.hooks, resource: resource, keys: k, value: g.value, token: g.token, acquired: g.start}
	if g.start.IsZero() {
		lock.acquired = time.Now()
	} else {
		lock.setValidUntil(g.start, g.lease)
	}
	ttl := time.Duration(millis(cfg.ttl)) * time.Millisecond
	leaseOK := g.lease == ttl || (cfg.renewed && g.lease > 0 && g.lease < ttl)
	if cfg.replicas == 0 && leaseOK && time.Until(lock.deadline()) > g.lease/2 {
		return lock, nil
	}
	err := l.confirm(ctx, cfg, lock)
	switch {
	case err == nil:
		return lock, nil
	case errors.Is(err, ErrNotHeld):
		return nil, errRequeue
	}
	l.passOn(k, g.value)
	if ctx.Err() != nil {
		return nil, join(ErrNotAcquired, ctx.Err())
	}
	return nil, err
}

// enter returns the line for k, creating it and subscribing to its channel when it is new,
// and waits up to patience for the subscription to be confirmed.
func (h *hub) enter(ctx context.Context, k keys, patience time.Duration) (*line, error) {
	h.mu.Lock()
	if h.closed.Load() {
		h.mu.Unlock()
		return nil, ErrClosed
	}
	ln := h.lines[k.channel]
	created := ln == nil
	if created {
		ln = &line{k: k, ready: make(chan struct{}), since: time.Now().UnixMilli()}
		if h.publish == "" {
			ln.isReady = true
			close(ln.ready)
		}
		h.lines[k.channel] = ln
	}
	ln.users++
	if ln.linger != nil {
		ln.linger.Stop()
		ln.linger = nil
	}
	h.mu.Unlock()
	if created {
		h.subscribe(ctx, k.channel)
	}
	t := time.NewTimer(patience)
	defer t.Stop()
	select {
	case <-ln.ready:
	case <-t.C:
	case <-ctx.Done():
	case <-h.done:
	}
	return ln, nil
}

// exit ends a call's use of ln; the last one out lets it linger for entryTTL, so a Locker
// that waits on a resource again soon keeps its subscription and fresh waiter key.
func (h *hub) exit(ln *line) {
	h.mu.Lock()
	defer h.mu.Unlock()
	ln.users--
	if ln.users > 0 || h.closed.Load() {
		return
	}
	ln.linger = time.AfterFunc(entryTTL, func() {
		h.mu.Lock()
		if ln.users > 0 || h.lines[ln.k.channel] != ln || h.closed.Load() {
			h.mu.Unlock()
			return
		}
		delete(h.lines, ln.k.channel)
		h.mu.Unlock()
		h.unsubscribe(ln.k.channel)
	})
}

// listening reports whether this Locker already waits on ch with a confirmed subscription,
// so a new waiter can join the queue straight away.
func (h *hub) listening(ch string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	ln := h.lines[ch]
	return ln != nil && ln.isReady
}

func (h *hub) isReady(ln *line) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return ln.isReady
}

// front reports whether w is the longest-waiting waiter of ln that has not been chosen: the
// one that polls.
func (h *hub) front(ln *line, w *waiter) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, x := range ln.waiters {
		if !x.chosen {
			return x == w
		}
	}
	return false
}

// subscribed marks ch's line as subscribed. A confirmation for a line with queued waiters
// follows a reconnection, which may have lost an announcement: the front waiter polls.
func (h *hub) subscribed(ch string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	ln := h.lines[ch]
	if ln == nil {
		return
	}
	if !ln.isReady {
		ln.isReady = true
		close(ln.ready)
	}
	h.kickLocked(ln)
}

// kick makes ch's front waiter poll now.
func (h *hub) kick(ch string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if ln := h.lines[ch]; ln != nil {
		h.kickLocked(ln)
	}
}

func (h *hub) kickLocked(ln *line) {
	for _, w := range ln.waiters {
		if !w.chosen && w.joined {
			select {
			case w.wake <- struct{}{}:
			default:
			}
			return
		}
	}
}

// selfEntry returns this Locker's waiter value for ch while it has elements queued there,
// so a release that grants the lock to this Locker need not read the key; "" otherwise.
func (h *hub) selfEntry(ch string) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	ln := h.lines[ch]
	if ln == nil || ln.queued == 0 || !time.Now().Before(ln.entry.until) {
		return ""
	}
	return ln.value(ln.entry)
}

// seenRelease records that a release sent at sent found this Locker's lock value held.
func (h *hub) seenRelease(ch string, sent time.Time, value string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if ln := h.lines[ch]; ln != nil {
		h.sawLocked(ln, sent, value)
	}
}

// jitter returns d ±20%.
func jitter(d time.Duration) time.Duration {
	return d - d/5 + time.Duration(rand.Int64N(int64(2*d/5)+1))
}
