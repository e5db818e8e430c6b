package fencing

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/fencekit/fencekit/internal/wire"
	"github.com/redis/go-redis/v9"
)

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
