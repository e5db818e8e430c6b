package fencing

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencekit/fencekit/internal/topology"
	"github.com/fencekit/fencekit/internal/wire"
	"github.com/redis/go-redis/v9"
)

// The waiting room of a Locker (docs/waiting.md): its calls' places in Redis's queues (lines)
// and their checks. It alone subscribes, polls, delivers grants and frees those not taken.

const (
	// pollEvery bounds the time (less jitter) between a line's checks, well within wire.EntryTTL.
	pollEvery = time.Second
	// grantLease is the longest lease of a grant: how long a dead waiter holds the resource up.
	grantLease = 3 * time.Second
	// renewAfter is how long after a write of the room's waiter key and the queue's TTL a join
	// need not write them again: the waiter polls, at most 1.2 pollEvery later, before they end.
	renewAfter = wire.EntryTTL - 3*pollEvery/2
	// outageWait is how long a waiter goes on through errors that can pass: a restart, a Cluster's
	// failover (cluster-node-timeout 15s) and the CLUSTERDOWN of a primary that rejoins.
	outageWait = 30 * time.Second
	// subscribePatience is how long a new line waits for its subscription before joining (a
	// grant announced before is not heard; a check catches it).
	subscribePatience = 50 * time.Millisecond
	// givenFor is how long a line remembers a token it delivered: longer than news of it can take.
	givenFor = 4 * (grantLease + wire.EntryTTL)
)

// room is one Locker's waiting calls. It is safe for concurrent use.
type room struct {
	id      string
	locker  *Locker
	publish string        // how the scripts announce grants (topology.Publish)
	outage  time.Duration // outageWait; shorter in tests
	notes   *notifier     // nil when waiters poll
	seq     atomic.Uint64 // numbers the elements

	mu    sync.Mutex       // guards lines
	lines map[string]*line // by the resource's channel
}

// waitCall is one call that waits.
type waitCall struct {
	keys   wire.Keys
	kind   wire.Kind
	ttl    time.Duration // a grant's lease is the TTL, at most grantLease
	floor  bool          // the rules of its tokens, which its grant follows (wire.Element)
	expiry time.Duration
	label  string
	// join sends the acquire script with the waiter's element and the room's waiter value
	// entry ("" when fresh): it takes a free resource nobody waits for, or queues the element.
	join func(ctx context.Context, elem, entry string) (*Lock, wire.AcquireReply, error)
	seen time.Time     // when the call's own attempt, if any, came back
	left time.Duration // the holders' lease left then
	// checked, if not nil, is called before each check with Redis (a poll script).
	checked func()
}

// waitEnded is wait's error when the wait ended: ctx, or the Locker closed.
type waitEnded struct {
	last  error         // the last error of the checks with Redis, if they were failing
	ahead int           // waiters ahead in the queue when it left; -1 when unknown
	left  time.Duration // the holders' lease left when it left; -1 when unknown
}

func (e *waitEnded) Error() string { return "wait ended" }

// newRoom returns the room of l; with listen, it subscribes to the grants' channels.
func newRoom(l *Locker, listen bool) *room {
	id, _ := newOwner() // crypto/rand never fails
	r := &room{id: id, locker: l, publish: l.topo.Publish(), outage: outageWait, lines: map[string]*line{}}
	switch {
	case listen && l.topo.Kind == topology.Cluster:
		r.notes = newNotifier(clusterRoute{l.topo}, r)
	case listen && l.topo.Kind == topology.Server:
		r.notes = newNotifier(serverRoute{l.client}, r)
	}
	return r
}

// close ends the subscriptions and waits for the notifier's goroutines.
func (r *room) close() {
	r.mu.Lock()
	for _, ln := range r.lines {
		ln.mu.Lock()
		if ln.linger != nil {
			ln.linger.Stop()
		}
		ln.mu.Unlock()
	}
	r.mu.Unlock()
	if r.notes != nil {
		r.notes.close()
	}
}

// line returns the line of the resource whose channel is ch, or nil.
func (r *room) line(ch string) *line {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lines[ch]
}

// listening reports whether the room waits on k's resource with a confirmed subscription.
func (r *room) listening(k wire.Keys) bool {
	ln := r.line(k.Channel)
	return ln != nil && ln.subscribed()
}

// queuedOn reports whether the room has elements queued for ks's resources (wire.Release.Self).
func (r *room) queuedOn(ks []wire.Keys) bool {
	for _, k := range ks {
		if ln := r.line(k.Channel); ln != nil {
			ln.mu.Lock()
			q := slices.ContainsFunc(ln.waiters, queued)
			ln.mu.Unlock()
			if q {
				return true
			}
		}
	}
	return false
}

// wait waits in the queue of c's resource for a grant, until ctx ends or the Locker closes (a
// *waitEnded), or checks fail for good or too long. parent is the call's own context, whose end
// also ends a wait for a grant already made. A lock the join took is returned as it is.
func (r *room) wait(ctx, parent context.Context, c waitCall) (*Lock, granted, error) {
	ln, err := r.enter(ctx, c)
	if err != nil {
		return nil, granted{}, err
	}
	defer r.exit(ln)
	if !c.seen.IsZero() && c.left > 0 {
		ln.leaseSeen(c.seen, c.left)
	}
	lease := min(c.ttl, grantLease)
	elem := wire.Element{Locker: r.id, Seq: r.seq.Add(1), Lease: lease, Floor: c.floor, Expiry: c.expiry, Kind: c.kind, Label: c.label}
	w := &waiter{kind: c.kind, elem: elem.String(), lease: lease, grant: make(chan granted, 1), wake: make(chan struct{}, 1)}
	lock, g, err := r.queue(ctx, parent, c, ln, w)
	ahead, left := r.leave(ln, w)
	if e, ok := err.(*waitEnded); ok {
		e.ahead, e.left = ahead, left
	}
	return lock, g, err
}

// queue adds w to ln and its element to the Redis queue, and waits for a grant.
func (r *room) queue(ctx, parent context.Context, c waitCall, ln *line, w *waiter) (*Lock, granted, error) {
	quiet := newBackoff(r.locker.cfg.pollMin, r.locker.cfg.pollMax) // polls while no announcement can come
	failing, failingSince := error(nil), time.Time{}                // see waitEnded
	lock, err := r.join(parent, c, ln, w)
	for {
		switch {
		case lock != nil:
			return lock, granted{}, nil
		case err == nil:
			failing = nil
		case !passing(err) || (failing != nil && time.Since(failingSince) >= r.outage):
			return nil, granted{}, err
		case failing == nil:
			// Keep the place: Redis keeps the elements of a room whose key lapsed until a
			// grant reaches them, and the next check that works puts back those dropped.
			failing, failingSince = err, time.Now()
		default:
			failing = err
		}
		d := min(r.locker.cfg.pollMax, pollEvery)
		if failing != nil || !ln.subscribed() || r.notes == nil {
			d = min(quiet.step(), d)
		}
		select {
		case g := <-w.grant:
			if parent.Err() != nil {
				w.grant <- g // for leave, which passes it on
				return nil, granted{}, &waitEnded{last: failing}
			}
			return nil, g, nil
		case <-w.wake:
		case <-time.After(ln.nextPoll(w, jitter(d), time.Now())):
		case <-ctx.Done():
			return nil, granted{}, &waitEnded{last: failing}
		case <-r.locker.done:
			return nil, granted{}, &waitEnded{last: failing}
		}
		ln.mu.Lock()
		unsure, front := w.unsure && !w.got, ln.front() == w
		ln.mu.Unlock()
		switch {
		case unsure:
			lock, err = r.join(parent, c, ln, w) // not a check: the holders may refuse its kind
			continue
		case !front:
			lock, err = nil, failing // no news
			continue
		}
		if c.checked != nil {
			c.checked()
		}
		lock, err = nil, r.check(parent, ln)
		if err == nil && parent.Err() != nil {
			err = failing // the check gave up on its call: keep the last error
		}
	}
}

// join adds w to ln (once) and its element to the Redis queue, or returns the lock it took.
func (r *room) join(ctx context.Context, c waitCall, ln *line, w *waiter) (*Lock, error) {
	ln.mu.Lock()
	others := slices.ContainsFunc(ln.waiters, queued)
	if w.sent.IsZero() {
		ln.waiters = append(ln.waiters, w)
		w.sent = time.Now()
	}
	deaf := !ln.subscribed() // a grant announced before the subscription is confirmed is lost
	entry := ""
	if !w.sent.Before(ln.renewBy) {
		entry = wire.WaiterValue(ln.since)
	}
	ln.mu.Unlock()
	pushed := false
	if others && entry == "" {
		// Others of this room are queued: the queue exists and the newcomer cannot be first.
		n, err := r.locker.client.RPushX(ctx, ln.k.Queue, w.elem).Result()
		pushed = err == nil && n > 0
	}
	var saw wire.AcquireReply
	if !pushed {
		lock, rep, err := c.join(ctx, w.elem, entry)
		if err != nil || lock != nil {
			// Without Redis's answer the element may be queued (leave takes it out).
			var answer redis.Error
			ln.mu.Lock()
			w.joined = err != nil && !errors.As(err, &answer)
			w.unsure = err != nil && passing(err)
			ln.mu.Unlock()
			return lock, err
		}
		saw = rep
	}
	ln.mu.Lock()
	w.joined, w.unsure = true, false
	if entry != "" {
		ln.renewBy = w.sent.Add(renewAfter) // the script wrote the key
	}
	if deaf && ln.subscribed() {
		// Confirmed while this call was on its way: a grant to w may have been announced to
		// nobody, and the front waiter's poll, woken by the confirmation, did not name w.
		ln.wakeFront()
	}
	ln.mu.Unlock()
	if !pushed {
		r.saw(ln.k, w.sent, saw.Held)
		ln.leaseSeen(time.Now(), time.Duration(saw.Left)*time.Millisecond)
	}
	return nil, nil
}

// check runs the poll script for ln: it renews the waiter key, puts back dropped elements, and
// finds lost grants and lapsed leases.
func (r *room) check(ctx context.Context, ln *line) error {
	ln.turn.Lock()
	defer ln.turn.Unlock()
	ln.mu.Lock()
	p := &wire.Poll{Keys: ln.k, ID: r.id, Entry: wire.WaiterValue(ln.since), Publish: r.publish}
	for _, w := range ln.waiters {
		if queued(w) {
			p.Elements = append(p.Elements, w.elem)
		}
	}
	ln.renewBy, ln.due = time.Now().Add(renewAfter), time.Time{}
	ln.mu.Unlock()
	sent := time.Now()
	rep, err := p.Run(ctx, r.locker.client)
	switch {
	case err != nil && ctx.Err() != nil:
		return nil // the caller's context ended: the wait ends with that
	case err != nil:
		return err
	case rep.Code == wire.Layout:
		return ErrLayout
	}
	for _, g := range rep.Grants {
		gr := grant{elem: g.Element, token: g.Token}
		if g.Now {
			gr.after = sent // by this poll
		}
		r.granted(ln.k, gr)
	}
	if rep.Code == wire.Busy {
		r.saw(ln.k, sent, rep.Held)
		ln.leaseSeen(time.Now(), time.Duration(rep.Left)*time.Millisecond)
	}
	return nil
}

// A room's lines: the grants that reach one (announced, in a release's reply or in a poll's),
// each delivered once (deliver); what a reply saw held; and a line's life.

// enter returns the line of c's resource, creating it and subscribing to its channel when new,
// and waits up to subscribePatience for the subscription. Exclusive and shared calls share a
// line; a line in use by calls of another limit is an error wrapping ErrInvalid.
func (r *room) enter(ctx context.Context, c waitCall) (*line, error) {
	limit := 0
	if c.kind.Limit > 1 && !c.kind.Shared {
		limit = c.kind.Limit
	}
	r.mu.Lock()
	if isDone(r.locker.done) {
		r.mu.Unlock()
		return nil, ErrClosed
	}
	ln := r.lines[c.keys.Channel]
	if ln == nil {
		ln = &line{k: c.keys, ready: make(chan struct{}), since: time.Now(), limit: limit}
		r.lines[c.keys.Channel] = ln
		if r.notes != nil {
			r.notes.listen(c.keys.Grants(r.id), true)
		}
	}
	ln.mu.Lock()
	if limit != ln.limit && ln.users > 0 {
		have := ln.limit
		ln.mu.Unlock()
		r.mu.Unlock()
		return nil, invalidf("this Locker waits for the resource as %s, this call %s", kindName(wire.Kind{Limit: max(have, 1)}), kindName(c.kind))
	}
	ln.limit, ln.users = limit, ln.users+1
	if ln.linger != nil {
		ln.linger.Stop()
		ln.linger = nil
	}
	ln.mu.Unlock()
	r.mu.Unlock()
	if r.notes != nil {
		select {
		case <-ln.ready:
		case <-time.After(subscribePatience):
		case <-ctx.Done():
		case <-r.locker.done:
		}
	}
	return ln, nil
}

// exit ends a call's use of ln; the last one out lets it linger for wire.EntryTTL.
func (r *room) exit(ln *line) {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	if ln.users--; ln.users > 0 || isDone(r.locker.done) {
		return
	}
	ln.linger = time.AfterFunc(wire.EntryTTL, func() { r.drop(ln) })
}

// drop forgets ln and its subscription, unless a call uses it again.
func (r *room) drop(ln *line) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ln.mu.Lock()
	idle := ln.users == 0
	ln.mu.Unlock()
	if idle && r.lines[ln.k.Channel] == ln && !isDone(r.locker.done) {
		delete(r.lines, ln.k.Channel)
		if r.notes != nil {
			r.notes.listen(ln.k.Grants(r.id), false)
		}
	}
}
