package fencing

import (
	"context"
	"errors"
	"slices"
	"strconv"
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

// line is the room's state for one resource it waits on.
type line struct {
	k     wire.Keys
	since time.Time     // when the line was created (in the waiter key)
	ready chan struct{} // closed once the server confirms the subscription
	turn  sync.Mutex    // held by a check with Redis and by a waiter's removal: one at a time

	mu      sync.Mutex          // guards what follows
	users   int                 // waiting calls that use the line
	linger  *time.Timer         // drops the line once idle for wire.EntryTTL
	limit   int                 // the limit of the calls that use it; 0: exclusive or shared
	waiters []*waiter           // in arrival order
	renewBy time.Time           // the waiter key needs no write before then
	due     time.Time           // the holders' leases, as last seen, end by then: the front waiter checks
	given   map[int64]time.Time // the tokens delivered lately, and when
	seen    time.Time           // the latest call whose reply showed seenOf, another's token, held:
	seenOf  int64               // any later token was granted after seen
}

// waiter is one waiting call in a line.
type waiter struct {
	elem   string        // its queue element
	kind   wire.Kind     // of the call
	lease  time.Duration // of a grant to it: its TTL, at most grantLease
	sent   time.Time     // when its element was first sent to Redis: any grant to it came later
	joined bool          // its element is (or may be) in the Redis queue, unless got
	unsure bool          // its join went unanswered (an error that can pass): it joins again
	got    bool          // a grant was delivered to it
	grant  chan granted  // capacity 1
	wake   chan struct{} // capacity 1: check with Redis now
}

// A grant, revealed by a reply or an announcement, is to elem with token, made after after.
type grant struct {
	elem  string
	token int64
	after time.Time
}

// granted is a grant delivered to its waiter: its lock value, token and lease, begun after start.
type granted struct {
	value string
	token int64
	lease time.Duration
	start time.Time
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

// granted gives g, a grant of k's resource, to its waiter of this room, or passes it on.
func (r *room) granted(k wire.Keys, g grant) {
	e, ok := wire.ParseElement(g.elem)
	if !ok || e.Locker != r.id {
		return // not this room's
	}
	if ln := r.line(k.Channel); ln != nil && ln.deliver(g) {
		return
	}
	r.passOn(k, wire.Value(g.elem, g.token), e.Kind)
}

// saw records that a reply to a call sent at sent showed held as the lock value of k's
// resource: a grant to the room's waiter is delivered, and any token dates the later grants.
func (r *room) saw(k wire.Keys, sent time.Time, held string) {
	owner, token, ok := wire.SplitValue(held)
	ln := r.line(k.Channel)
	if !ok || ln == nil {
		return
	}
	if e, ok := wire.ParseElement(owner); ok && e.Locker == r.id {
		ln.deliver(grant{elem: owner, token: token})
	}
	ln.mu.Lock()
	if sent.After(ln.seen) {
		ln.seen, ln.seenOf = sent, token
	}
	ln.mu.Unlock()
}

// passOn releases value, a grant of kind that no waiter takes (or "<element>:", any token of
// its element), keeping its record (a grant's lease is short). Errors are ignored: it lapses then.
func (r *room) passOn(k wire.Keys, value string, kind wire.Kind) {
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	r.locker.release(ctx, &wire.Release{Keys: []wire.Keys{k}, Values: []string{value}, Kind: kind, Keep: true})
}

// heard handles an announcement on one of the room's channels: "<element>:<token>".
func (r *room) heard(ch, payload string) {
	k, ok := wire.GrantsOf(ch, r.id)
	if elem, token, ok2 := wire.SplitValue(payload); ok && ok2 {
		r.granted(k, grant{elem: elem, token: token})
	}
}

// subscribed makes ch's front waiter check now: the confirmation may follow a lost announcement.
func (r *room) subscribed(ch string) {
	k, ok := wire.GrantsOf(ch, r.id)
	ln := r.line(k.Channel)
	if !ok || ln == nil {
		return
	}
	ln.mu.Lock()
	defer ln.mu.Unlock()
	if !ln.subscribed() {
		close(ln.ready)
	}
	ln.wakeFront()
}

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

// subscribed reports whether the server confirmed ln's subscription.
func (ln *line) subscribed() bool { return isDone(ln.ready) }

// deliver hands g to its waiter, dated once: after g.after, after the waiter's element was
// sent, and after any call that saw an older token held. It reports false when no waiter of
// ln takes it (a grant a reply revealed is then left to the leaving waiter, which frees it).
// Grants reach a line in any order, several at once: they are matched by token.
func (ln *line) deliver(g grant) bool {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	if _, ok := ln.given[g.token]; ok {
		return true // delivered already
	}
	i := slices.IndexFunc(ln.waiters, func(w *waiter) bool { return w.elem == g.elem })
	if i < 0 || ln.waiters[i].got {
		return false
	}
	w := ln.waiters[i]
	w.got = true
	now := time.Now()
	if ln.given == nil {
		ln.given = map[int64]time.Time{}
	}
	if len(ln.given) >= 256 && len(ln.given)&255 == 0 {
		for t, at := range ln.given {
			if now.Sub(at) > givenFor {
				delete(ln.given, t)
			}
		}
	}
	ln.given[g.token] = now
	start := g.after
	if w.sent.After(start) {
		start = w.sent
	}
	if ln.seenOf < g.token && ln.seen.After(start) {
		start = ln.seen
	}
	w.grant <- granted{value: wire.Value(g.elem, g.token), token: g.token, lease: w.lease, start: start}
	return true
}

// leaseSeen records that the holders had left of their lease when a reply came back at replied:
// the front waiter checks as soon as it ends (a holder that died announces nothing), unless its
// next poll comes first; at once for a left of 0 (PTTL's for a lease ended during the script).
func (ln *line) leaseSeen(replied time.Time, left time.Duration) {
	if left < 0 {
		return
	}
	ln.mu.Lock()
	ln.due = replied.Add(left + time.Millisecond) // PTTL is rounded to the millisecond
	ln.mu.Unlock()
}

// nextPoll returns how long w waits for its next check: d, or less for a front waiter whose
// holders' lease ends sooner.
func (ln *line) nextPoll(w *waiter, d time.Duration, now time.Time) time.Duration {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	if !ln.due.IsZero() && ln.front() == w {
		return min(d, max(ln.due.Sub(now), 0))
	}
	return d
}

// front returns ln's longest-waiting waiter without a grant, or nil; the caller holds ln.mu.
func (ln *line) front() *waiter {
	i := slices.IndexFunc(ln.waiters, func(w *waiter) bool { return !w.got })
	if i < 0 {
		return nil
	}
	return ln.waiters[i]
}

// wakeFront makes ln's front waiter poll now, or once its join returns; the caller holds ln.mu.
func (ln *line) wakeFront() {
	if w := ln.front(); w != nil {
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
}

// queued reports whether w's element is in the Redis queue, as far as the room knows.
func queued(w *waiter) bool { return w.joined && !w.got && !w.unsure }

// leave takes w off ln, after a check in flight (which would put back the element of a grant w
// released), passing on a grant it did not take, or removing its element. It returns how many
// waiters were ahead of it and the holders' lease left, each -1 when unknown.
func (r *room) leave(ln *line, w *waiter) (ahead int, left time.Duration) {
	ln.turn.Lock()
	defer ln.turn.Unlock()
	ln.mu.Lock()
	ln.waiters = slices.DeleteFunc(ln.waiters, func(x *waiter) bool { return x == w })
	inQueue := w.joined && !w.got // no grant is delivered to w from now on
	ln.mu.Unlock()
	ahead, left = -1, -1
	if len(w.grant) > 0 { // a grant nobody took
		r.passOn(ln.k, (<-w.grant).value, w.kind)
		return ahead, left
	}
	if !inQueue {
		return ahead, left
	}
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	// One round trip: where the element stood (for the error), its removal, the holders' lease.
	var pos, rem *redis.IntCmd
	var pttl *redis.DurationCmd
	var hash *redis.MapStringStringCmd
	_, _ = r.locker.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		pos = p.LPos(ctx, ln.k.Queue, w.elem, redis.LPosArgs{})
		rem = p.LRem(ctx, ln.k.Queue, 0, w.elem)
		pttl = p.PTTL(ctx, ln.k.Lock)
		hash = p.HGetAll(ctx, ln.k.Lock) // WRONGTYPE for an exclusive holder's string
		return nil
	})
	if n, err := pos.Result(); err == nil {
		ahead = int(n)
	}
	left = holdersLeft(pttl, hash)
	if n, err := rem.Result(); err == nil && n == 0 {
		// Popped: granted to w (announced on the way; free it now) or dropped as dead.
		r.passOn(ln.k, w.elem+":", w.kind)
	}
	return ahead, left
}

// holdersLeft returns the holders' lease left from the replies of PTTL and HGETALL of the lock:
// the exclusive holder's (the key's TTL); the latest of the live shared holders'; for a limit,
// the earliest of the live holders' when every slot is taken, else 0; -1 when unknown. The
// time is the hash's expiry t less its TTL, as the scripts read it.
func holdersLeft(pttl *redis.DurationCmd, hash *redis.MapStringStringCmd) time.Duration {
	d, err := pttl.Result()
	if err != nil || d < 0 {
		return -1
	}
	fields, err := hash.Result()
	if err != nil { // an exclusive holder: a string
		return d
	}
	t, err := strconv.ParseInt(fields["t"], 10, 64)
	if err != nil {
		return -1 // the earlier layout: unknown
	}
	now := time.UnixMilli(t).Add(-d)
	kind, holders, _ := wire.HashHolders(fields)
	latest, earliest, live := time.Time{}, time.Time{}, 0
	for _, h := range holders {
		if !h.End.After(now) {
			continue
		}
		live++
		if h.End.After(latest) {
			latest = h.End
		}
		if earliest.IsZero() || h.End.Before(earliest) {
			earliest = h.End
		}
	}
	switch {
	case live == 0:
		return 0
	case kind.Shared:
		return latest.Sub(now)
	case live < kind.Limit:
		return 0
	}
	return earliest.Sub(now)
}
